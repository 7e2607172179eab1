// Transcoders: the MLP's input (the mlp_in site) encoded, its output (mlp_out) reconstructed. The mlp_in site against
// the llama fixture's own weights; each layout's transcoder (SAELens, Gemma Scope, Gemma Scope 2, sparsify) written
// with random tensors and read back against its source's arithmetic written out here; latents and errors captured
// through the readout against mlp_in and mlp_out read on their own; steering and clamping into mlp_out.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "capture/memory_capture.h"
#include "common/files.h"
#include "common/json.h"
#include "io/safetensors.h"
#include "model/transformer.h"
#include "readout/readout.h"
#include "sae/sae.h"
#include "sae/sae_flags.h"
#include "sae_fixtures.h"
#include "steering/steering.h"
#include "tensor_files.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

// Every token's values at `site` of `layer` for one token sequence: [tokens, hidden].
at::Tensor site_rows(const model::TransformerModel& model, Site site, int64_t layer) {
  readout::Request request;
  request.site = site;
  request.position = Position::kAll;
  request.layers = {layer};
  return readout::read_rows(model, {{1, 5, 9, 13, 21, 7, 30}}, request).select(1, 0);
}

at::Tensor weight(const safetensors::File& file, const std::string& name) {
  return read_tensor(file, file.at(name)).to(at::kFloat);
}

// A random JumpReLU transcoder of the gemma3_text fixture's width (64) with 256 latents and a skip connection.
struct RandomTranscoder {
  at::Tensor w_enc = at::randn({64, 256}) * 0.3, b_enc = at::randn({256}) * 0.1;
  at::Tensor w_dec = at::randn({256, 64}) * 0.2, b_dec = at::randn({64}) * 0.1;
  at::Tensor threshold = at::rand({256}) * 0.5, skip = at::randn({64, 64}) * 0.1;

  at::Tensor latents(const at::Tensor& x) const {
    const at::Tensor h = at::matmul(x, w_enc) + b_enc;
    return h * (h > threshold).to(at::kFloat);
  }
  at::Tensor decoded(const at::Tensor& z) const { return at::matmul(z, w_dec) + b_dec; }
};

// Gemma Scope 2's layout of `t` for layer 3 of a Gemma 3 (params.safetensors + config.json); the skip
// affine_skip_connection [d_in, d_out], as Google defines it (x A).
std::string write_gemma_scope_2(const TempDir& tmp, const RandomTranscoder& t, const std::string& name) {
  const std::string dir = tmp.file("gemma-scope-2-270m-pt/transcoder/" + name);
  make_directories(dir);
  write_text(dir + "/config.json",
                                Json({{"architecture", "jump_relu"},
                                      {"hf_hook_point_in", "model.layers.3.pre_feedforward_layernorm.output"},
                                      {"hf_hook_point_out", "model.layers.3.post_feedforward_layernorm.output"},
                                      {"affine_connection", true},
                                      {"type", "transcoder"},
                                      {"width", 256}})
                                    .dump());
  write_fp32_tensors(dir + "/params.safetensors", {{"w_enc", t.w_enc}, {"w_dec", t.w_dec}, {"b_enc", t.b_enc},
                                              {"b_dec", t.b_dec}, {"threshold", t.threshold},
                                              {"affine_skip_connection", t.skip}});
  return dir;
}

// SAELens' jumprelu_skip_transcoder layout of `t` from `hook` to blocks.3.hook_mlp_out (W_skip [d_out, d_in]).
std::string write_saelens_transcoder(const TempDir& tmp, const RandomTranscoder& t, const std::string& hook) {
  const std::string dir = tmp.file("saelens_tc");
  make_directories(dir);
  const Json config = {{"architecture", "jumprelu_skip_transcoder"}, {"d_in", 64}, {"d_sae", 256}, {"d_out", 64},
                       {"apply_b_dec_to_input", false}, {"normalize_activations", "none"},
                       {"metadata", {{"hook_name", hook}, {"hook_name_out", "blocks.3.hook_mlp_out"}}}};
  write_text(dir + "/cfg.json", config.dump());
  write_fp32_tensors(dir + "/sae_weights.safetensors", {{"W_enc", t.w_enc}, {"b_enc", t.b_enc}, {"W_dec", t.w_dec},
                                                    {"b_dec", t.b_dec}, {"threshold", t.threshold}, {"W_skip", t.skip}});
  return dir;
}

const loading::SharedModel& gemma() { return sae_fixture_model(); }

const std::vector<std::string> kTexts = {"The river bends twice before the town.", "Numbers: 3, 17, 42 and a word."};

capture::CaptureOptions rows_at(const std::string& site, const std::string& dir) {
  capture::CaptureOptions options;
  options.prompt_suffix = "";
  options.position = Position::kAll;
  options.layers = "3";
  options.saes = {{"tc", dir}};
  options.sae_site = parse_sae_site(site);
  if (!options.sae_site) options.site = parse_site(site);
  options.sae_storage.dense = options.sae_site.has_value();
  return options;
}

}  // namespace

TEST_CASE("mlp_in is what the MLP reads: llama's post-attention norm of resid_mid (whose MLP is mlp_out), NeoX's of resid_pre" *
          doctest::test_suite("numeric")) {
  const auto llama = model::TransformerModel::load(fixture_model("llama"), {});
  const safetensors::File weights(fixture_model("llama") + "/model.safetensors");
  for (int64_t layer : {0, 2}) {
    CAPTURE(layer);
    const std::string prefix = fmt::format("model.layers.{}.", layer);
    const at::Tensor middle = site_rows(llama, Site::kResidMid, layer);
    const at::Tensor mlp_in = site_rows(llama, Site::kMlpIn, layer);
    const at::Tensor expected_in =
        middle * at::rsqrt(middle.pow(2).mean(-1, true) + 1e-5) * weight(weights, prefix + "post_attention_layernorm.weight");
    CHECK(worst_row_error(mlp_in, expected_in) <= 1e-4);
    const at::Tensor gate = at::matmul(mlp_in, weight(weights, prefix + "mlp.gate_proj.weight").t());
    const at::Tensor up = at::matmul(mlp_in, weight(weights, prefix + "mlp.up_proj.weight").t());
    const at::Tensor expected_out = at::matmul(at::silu(gate) * up, weight(weights, prefix + "mlp.down_proj.weight").t());
    CHECK(worst_row_error(site_rows(llama, Site::kMlpOut, layer), expected_out) <= 1e-4);
  }
  // GPT-NeoX's parallel branches: the MLP reads the layer's input through its own LayerNorm.
  const auto neox = model::TransformerModel::load(fixture_model("gpt_neox"), {});
  const safetensors::File neox_weights(fixture_model("gpt_neox") + "/model.safetensors");
  const at::Tensor input = site_rows(neox, Site::kResidPre, 1);
  const at::Tensor normed = at::layer_norm(input, {64}, weight(neox_weights, "gpt_neox.layers.1.post_attention_layernorm.weight"),
                                           weight(neox_weights, "gpt_neox.layers.1.post_attention_layernorm.bias"), 1e-5);
  CHECK(worst_row_error(site_rows(neox, Site::kMlpIn, 1), normed) <= 1e-4);
  // OLMo 2 has no norms before its branches: the MLP reads the residual between them.
  const auto olmo = model::TransformerModel::load(fixture_model("olmo2"), {});
  CHECK(at::allclose(site_rows(olmo, Site::kMlpIn, 1), site_rows(olmo, Site::kResidMid, 1)));
}

TEST_CASE("ln2_normalized is TransformerLens' ln2.hook_normalized: the pre-MLP norm before its weight and bias" *
          doctest::test_suite("numeric")) {
  // The model's own eps: the llama fixture's 1e-5 changed to 0.5, which the rows then show.
  TempDir tmp;
  copy_dir(fixture_model("llama"), tmp.file("llama"));
  Json config = read_json_file(tmp.file("llama/config.json"));
  config["rms_norm_eps"] = 0.5;
  write_text(tmp.file("llama/config.json"), config.dump());
  const auto llama = model::TransformerModel::load(tmp.file("llama"), {});
  const at::Tensor middle = site_rows(llama, Site::kResidMid, 2);
  CHECK(worst_row_error(site_rows(llama, Site::kLn2Normalized, 2), middle * at::rsqrt(middle.pow(2).mean(-1, true) + 0.5)) <= 1e-5);
  const auto neox = model::TransformerModel::load(fixture_model("gpt_neox"), {});
  const at::Tensor input = site_rows(neox, Site::kResidPre, 1);
  const at::Tensor centred = input - input.mean(-1, true);
  CHECK(worst_row_error(site_rows(neox, Site::kLn2Normalized, 1), centred * at::rsqrt(centred.pow(2).mean(-1, true) + 1e-5)) <= 1e-5);
  const auto olmo = model::TransformerModel::load(fixture_model("olmo2"), {});
  CHECK_THROWS_WITH(site_rows(olmo, Site::kLn2Normalized, 1), doctest::Contains("has no norm before its MLP"));
}

TEST_CASE("each layout's transcoder reads mlp_in and reconstructs mlp_out as its source computes it" *
          doctest::test_suite("numeric")) {
  TempDir tmp;
  const RandomTranscoder t;
  const at::Tensor x = at::randn({9, 64}) * 2;
  const at::Tensor z = t.latents(x);
  REQUIRE(z.gt(0).any().item<bool>());
  auto check_read = [&](const sae::SparseAutoencoder& read, const at::Tensor& latents, const at::Tensor& reconstruction,
                        Site site = Site::kMlpIn) {
    CHECK(read.site == site);
    CHECK(read.output_site == Site::kMlpOut);
    CHECK(read.layer == 3);
    CHECK(read.d_out == 64);
    CHECK(read.record()["output_site"] == "mlp_out");
    CHECK(worst_row_error(read.encode(x), latents) <= 1e-5);
    CHECK(worst_row_error(read.decode(read.encode(x), x), reconstruction) <= 1e-5);
  };
  SUBCASE("Gemma Scope 2 with its affine skip connection: z W_dec + b_dec + x A") {
    check_read(sae::load(write_gemma_scope_2(tmp, t, "layer_3_width_256_l0_small_affine")), z,
               t.decoded(z) + at::matmul(x, t.skip));
  }
  SUBCASE("SAELens' jumprelu_skip_transcoder: W_skip [d_out, d_in], z W_dec + b_dec + x W_skip^T") {
    check_read(sae::load(write_saelens_transcoder(tmp, t, "blocks.3.mlp.hook_in")), z, t.decoded(z) + at::matmul(x, t.skip.t()));
  }
  SUBCASE("sparsify's transcode with skip_connection at layers.3.mlp: TopK, nothing subtracted, x W_skip^T") {
    const std::string dir = tmp.file("sae-gemma/layers.3.mlp");
    make_directories(dir);
    write_text(dir + "/cfg.json", Json({{"k", 8}, {"num_latents", 256}, {"transcode", true},
                                                           {"skip_connection", true}, {"d_in", 64}}).dump());
    const at::Tensor encoder = t.w_enc.t().contiguous();
    write_fp32_tensors(dir + "/sae.safetensors", {{"encoder.weight", encoder}, {"encoder.bias", t.b_enc},
                                              {"W_dec", t.w_dec}, {"b_dec", t.b_dec}, {"W_skip", t.skip}});
    const at::Tensor h = at::relu(at::matmul(x, t.w_enc) + t.b_enc);
    const auto [values, indices] = h.topk(8, -1);
    const at::Tensor topk = at::zeros_like(h).scatter_(-1, indices, values);
    const sae::SparseAutoencoder read = sae::load(dir);
    check_read(read, topk, t.decoded(topk) + at::matmul(x, t.skip.t()));
    CHECK(read.raw_module_output);
    // Gemma's mlp_out is after a post-norm the transcoder never saw.
    CHECK_THROWS_WITH(sae::load_saes({{"tc", dir}}, gemma().model->config()),
                         doctest::Contains("predicts the MLP module's output before its post-norm"));
    // Regression: a plain SAE at a module's hookpoint was taken for a transcoder to resid_post and refused as one; it
    // reads the module's own output, which Gemma's post-normed attn_out is not.
    const std::string attention = tmp.file("sparsify-attn/layers.3.self_attn");
    copy_dir(kSaes + "/sparsify/layers.3", attention);
    CHECK(sae::load(attention).site == Site::kAttnOut);
    CHECK_THROWS_WITH(sae::load_saes({{"attn", attention}}, gemma().model->config()),
                      doctest::Contains("SAE 'attn' reads the attention module's output before its post-norm, which this "
                                        "model's attn_out (after the post-norm) is not"));
    // Regression: a SAELens config naming a Hugging Face module's own output was read as Gemma's post-normed mlp_out,
    // where sparsify's was refused.
    const std::string module = tmp.file("hf-mlp");
    copy_dir(kSaes + "/saelens_standard", module);
    Json config = read_json_file(module + "/cfg.json");
    for (const char* hook : {"model.layers.3.mlp", "model.layers.3.post_feedforward_layernorm.output"}) {
      CAPTURE(hook);
      config["metadata"]["hook_name"] = hook;
      write_text(module + "/cfg.json", config.dump());
      const sae::SparseAutoencoder read = sae::load(module);
      CHECK(read.site == Site::kMlpOut);
      CHECK(read.raw_module_output == (std::string(hook) == "model.layers.3.mlp"));
    }
    config["metadata"]["hook_name"] = "model.layers.3.mlp";
    write_text(module + "/cfg.json", config.dump());
    CHECK_THROWS_WITH(sae::load_saes({{"hf", module}}, gemma().model->config()),
                      doctest::Contains("SAE 'hf' reads the MLP module's output before its post-norm"));
  }
  SUBCASE("Gemma Scope's -transcoders release: the .npz read as the same JumpReLU, from ln2_normalized to mlp_out") {
    const std::string dir = tmp.file("gemma-scope-2b-pt-transcoders/layer_3/width_256/average_l0_20");
    copy_dir(kSaes + "/gemma_scope/gemma-scope-2b-pt-res/layer_3/width_256/average_l0_20", dir);
    const sae::SparseAutoencoder residual = sae::load(kSaes + "/gemma_scope/gemma-scope-2b-pt-res/layer_3/width_256/average_l0_20");
    const at::Tensor latents = residual.encode(x);
    // Trained after the pre-MLP RMSNorm with its gain folded into the MLP (regression: read at mlp_in, after the gain).
    check_read(sae::load(dir), latents, residual.decode(latents, x), Site::kLn2Normalized);
  }
}

TEST_CASE("a transcoder's latents read mlp_in and its error is mlp_out's, at every token and pooled" *
          doctest::test_suite("numeric")) {
  TempDir tmp;
  const RandomTranscoder t;
  const std::string dir = write_gemma_scope_2(tmp, t, "layer_3_width_256_l0_small_affine");
  const at::Tensor mlp_in = capture::capture_rows(gemma(), kTexts, rows_at("mlp_in", dir)).rows[0];
  const at::Tensor mlp_out = capture::capture_rows(gemma(), kTexts, rows_at("mlp_out", dir)).rows[0];
  const at::Tensor z = t.latents(mlp_in);
  const at::Tensor latents = capture::capture_rows(gemma(), kTexts, rows_at("sae:tc", dir)).rows[0];
  CHECK(worst_row_error(latents, z) <= 1e-4);
  const capture::CapturedRows error = capture::capture_rows(gemma(), kTexts, rows_at("sae-error:tc", dir));
  const at::Tensor expected = mlp_out - t.decoded(z) - at::matmul(mlp_in, t.skip);
  CHECK(worst_row_error(error.rows[0], expected) <= 1e-4 * mlp_out.abs().amax().item<double>() /
                                                        expected.abs().amax().item<double>());
  capture::CaptureOptions mean = rows_at("sae-error:tc", dir);
  mean.position = Position::kMean;
  const at::Tensor pooled = capture::capture_rows(gemma(), kTexts, mean).rows[0];
  for (size_t i = 0; i < kTexts.size(); ++i) {
    CAPTURE(i);
    // Mean pooling leaves out the BOS.
    const at::Tensor tokens = error.rows[0].slice(0, error.offsets[i] + 1, error.offsets[i + 1]);
    CHECK(at::allclose(pooled[static_cast<int64_t>(i)], tokens.mean(0), 1e-4, 1e-5));
  }
}

TEST_CASE("steering by a transcoder's latent writes into mlp_out; clamping reads the latent from mlp_in" *
          doctest::test_suite("numeric")) {
  TempDir tmp;
  const RandomTranscoder t;
  const std::string dir = write_gemma_scope_2(tmp, t, "layer_3_width_256_l0_small_affine");
  auto mlp_out_with = [&](const std::string& op) {
    capture::CaptureOptions options = rows_at("mlp_out", dir);
    if (!op.empty()) {
      const bool clamp = op.rfind("clamp ", 0) == 0;
      options.steering.ops.push_back(steering::parse_latent_op(
          op.substr(op.find(' ') + 1), clamp ? steering::SteeringAction::kClamp : steering::SteeringAction::kAdd));
    }
    return capture::capture_rows(gemma(), kTexts, options).rows[0];
  };
  const at::Tensor plain = mlp_out_with("");
  CHECK(at::allclose(mlp_out_with("add tc:5=4"), plain + 4 * t.w_dec[5], 1e-5, 1e-5));
  const at::Tensor z = t.latents(capture::capture_rows(gemma(), kTexts, rows_at("mlp_in", dir)).rows[0]);
  const int64_t latent = std::get<1>(z.sum(0).max(0)).item<int64_t>();  // one that fires
  for (const double value : {0.0, 6.0}) {
    CAPTURE(value);
    const at::Tensor clamped = mlp_out_with(fmt::format("clamp tc:{}={}", latent, value));
    CHECK(at::allclose(clamped, plain + (value - z.select(1, latent).unsqueeze(1)) * t.w_dec[latent], 1e-4, 1e-5));
  }
}

// Regression: a transcoder trained on TransformerLens' blocks.L.ln2.hook_normalized was read at mlp_in, after the
// norm's weight, which the hook is before.
TEST_CASE("a transcoder on ln2.hook_normalized encodes the norm's output before its weight, read and clamped" *
          doctest::test_suite("numeric")) {
  TempDir tmp;
  const RandomTranscoder t;
  const std::string dir = write_saelens_transcoder(tmp, t, "blocks.3.ln2.hook_normalized");
  CHECK(sae::load(dir).site == Site::kLn2Normalized);
  const at::Tensor middle = capture::capture_rows(gemma(), kTexts, rows_at("resid_mid", dir)).rows[0];
  const at::Tensor normalized = capture::capture_rows(gemma(), kTexts, rows_at("ln2_normalized", dir)).rows[0];
  const double eps = gemma().model->config().norm_eps;
  CHECK(worst_row_error(normalized, middle * at::rsqrt(middle.pow(2).mean(-1, true) + eps)) <= 1e-5);
  const at::Tensor mlp_in = capture::capture_rows(gemma(), kTexts, rows_at("mlp_in", dir)).rows[0];
  REQUIRE_FALSE(at::allclose(t.latents(normalized), t.latents(mlp_in), 1e-3, 1e-3));
  // Latents and a clamp into mlp_out on Gemma 3 (the norm reads resid_mid) and GPT-NeoX (its branches run in parallel:
  // the norm reads resid_pre).
  loading::ModelRequest neox_request;
  neox_request.model_dir = fixture_model("gpt_neox");
  neox_request.device = "cpu";
  neox_request.dtype = "fp32";
  const loading::SharedModel neox = loading::load_shared_model(neox_request);
  for (const loading::SharedModel* model : {&gemma(), &neox}) {
    CAPTURE(model->model->config().text_model_type);
    const at::Tensor z = t.latents(capture::capture_rows(*model, kTexts, rows_at("ln2_normalized", dir)).rows[0]);
    CHECK(worst_row_error(capture::capture_rows(*model, kTexts, rows_at("sae:tc", dir)).rows[0], z) <= 1e-4);
    capture::CaptureOptions options = rows_at("mlp_out", dir);
    const at::Tensor plain = capture::capture_rows(*model, kTexts, options).rows[0];
    const int64_t latent = std::get<1>(z.sum(0).max(0)).item<int64_t>();
    options.steering.ops.push_back(steering::parse_latent_op(fmt::format("tc:{}=0", latent), steering::SteeringAction::kClamp));
    const at::Tensor clamped = capture::capture_rows(*model, kTexts, options).rows[0];
    CHECK(at::allclose(clamped, plain - z.select(1, latent).unsqueeze(1) * t.w_dec[latent], 1e-4, 1e-5));
  }
  CHECK_THROWS_WITH(sae::load_saes({{"tc", dir}}, model::TransformerModel::load(fixture_model("olmo2"), {}).config()),
                    doctest::Contains("SAE 'tc' reads the ln2_normalized of layer 3, but the model (olmo2) has no norm before its MLP"));
}
