"""The reference's probe modules (brije src/probes/probe_models.py): the same parameters and state-dict names,
for the checks that load our probe files into them. Needs torch only."""
import torch
import torch.nn as nn


class _LinearHead(nn.Module):
    """Dropout -> Linear(input_dim, outputs): BinaryLinearProbe has one output, LinearProbe one per class."""

    def __init__(self, input_dim, outputs, dropout):
        super().__init__()
        self.input_dim = input_dim
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(input_dim, outputs)

    def forward(self, x):
        return self.linear(self.dropout(x))


class _MultiHeadAttentionHead(nn.Module):
    """Two ReLU layers -> self-attention over one position -> Linear(hidden_dim, outputs)."""

    def __init__(self, input_dim, outputs, hidden_dim, num_heads, dropout):
        super().__init__()
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.encoder = nn.Sequential(
            nn.Linear(input_dim, hidden_dim), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Dropout(dropout))
        self.attention = nn.MultiheadAttention(embed_dim=hidden_dim, num_heads=num_heads, dropout=dropout,
                                               batch_first=True)
        self.classifier = nn.Linear(hidden_dim, outputs)

    def forward(self, x):
        h = self.encoder(x).unsqueeze(1)
        h_attn, _ = self.attention(h, h, h)
        return self.classifier(h_attn.squeeze(1))


class BinaryLinearProbe(_LinearHead):
    def __init__(self, input_dim, dropout=0.1):
        super().__init__(input_dim, 1, dropout)


class BinaryMultiHeadProbe(_MultiHeadAttentionHead):
    def __init__(self, input_dim, hidden_dim=512, num_heads=8, dropout=0.1):
        super().__init__(input_dim, 1, hidden_dim, num_heads, dropout)


class LinearProbe(_LinearHead):
    def __init__(self, input_dim, num_classes, dropout=0.1):
        super().__init__(input_dim, num_classes, dropout)
        self.num_classes = num_classes


class MultiHeadProbe(_MultiHeadAttentionHead):
    def __init__(self, input_dim, num_classes, hidden_dim=512, num_heads=8, dropout=0.1):
        super().__init__(input_dim, num_classes, hidden_dim, num_heads, dropout)
        self.num_classes = num_classes


CLASSES = {c.__name__: c for c in (BinaryLinearProbe, BinaryMultiHeadProbe, LinearProbe, MultiHeadProbe)}


class AttentionProbe(torch.nn.Module):
    """Not the reference's (it has none): EleutherAI's attention-probes AttentionProbe(d_in, n_heads, output_dim=1)
    without the MLP, which --model-type attention files load into strictly: forward(x [B, T, H], mask [B, T],
    position [B, T]) -> logits [B, output_dim]."""

    def __init__(self, input_dim, num_heads=1, output_dim=1):
        super().__init__()
        self.heads, self.outputs = num_heads, output_dim
        self.q = torch.nn.Linear(input_dim, num_heads, bias=False)
        self.v = torch.nn.Linear(input_dim, num_heads * output_dim)
        self.position_weight = torch.nn.Parameter(torch.zeros(num_heads))

    def forward(self, x, mask, position):
        k = self.q(x) - (1 - mask.unsqueeze(-1).to(x.dtype)) * 1e9 + position.unsqueeze(-1) * self.position_weight
        p = torch.softmax(k, dim=1)
        v = self.v(x).unflatten(-1, (self.heads, self.outputs))
        return (p.unsqueeze(-1) * v).sum((1, 2))


def reference_probe(model_class, model_config):
    """The reference's load_probe: the class named in the checkpoint, built from its model_config."""
    return CLASSES[model_class](**model_config)
