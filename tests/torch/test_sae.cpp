// Sparse autoencoders in their published layouts (tests/fixtures/saes: the shared fixtures' nine random SAEs for the
// gemma3_text fixture's layer 3, made with NumPy by tools/gen_sae_fixtures.py): each layout read, its latents and
// reconstructions of the fixture's reference activations against NumPy's; the .npz reader; refusals naming the field.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "io/npz.h"
#include "io/safetensors.h"
#include "sae/latent_reading.h"
#include "sae/sae.h"
#include "sae_fixtures.h"
#include "tensor_files.h"
#include "test_util.h"

using namespace probekit;
using probekit::testing::fixture_model;
using probekit::testing::kFixtureSaes;
using probekit::testing::kSaes;
using probekit::testing::worst_row_error;

namespace {

at::Tensor tensor(const safetensors::File& file, const std::string& name) {
  return probekit::testing::read_tensor(file, file.at(name)).to(at::kFloat);
}

std::string refusal(const std::string& path) {
  try {
    sae::load(path);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "loaded";
}

// A copy of the standard SAE fixture in tmp/`name`, its cfg.json changed by `edit`.
std::string sae_variant(const probekit::testing::TempDir& tmp, const std::string& name,
                        const std::function<void(Json&)>& edit) {
  const std::string dir = tmp.file(name);
  probekit::testing::copy_dir(kSaes + "/saelens_standard", dir);
  Json config = read_json_file(dir + "/cfg.json");
  edit(config);
  probekit::testing::write_text(dir + "/cfg.json", config.dump());
  return dir;
}

}  // namespace

TEST_CASE("the nine fixture SAEs in their published layouts encode and decode as NumPy does" * doctest::test_suite("numeric")) {
  const safetensors::File references(kSaes + "/reference.safetensors");
  const safetensors::File activations(fixture_model("gemma3_text") + "/reference.safetensors");
  const Json meta = read_json_file(kSaes + "/reference.json");
  for (const auto& fixture : kFixtureSaes) {
    const std::string& name = fixture.first;
    const std::string& path = fixture.second;
    CAPTURE(name);
    const sae::SparseAutoencoder dictionary = sae::load(kSaes + "/" + path);
    CHECK(dictionary.site == Site::kResidPost);
    CHECK(dictionary.layer == 3);
    CHECK(dictionary.d_in == 64);
    CHECK(dictionary.d_sae == 256);
    for (int64_t t = 0; t < meta["texts"].get<int64_t>(); ++t) {
      const at::Tensor rows = tensor(activations, fmt::format("t{}.layers", t))[3];
      const at::Tensor latents = dictionary.encode(rows);
      const at::Tensor reconstruction = dictionary.decode(latents, rows);
      CHECK(worst_row_error(latents, tensor(references, fmt::format("{}.t{}.latents", name, t))) <= 1e-4);
      CHECK(worst_row_error(reconstruction, tensor(references, fmt::format("{}.t{}.reconstruction", name, t))) <= 1e-4);
    }
  }
}

TEST_CASE("latents shown beside tokens skip the reconstruction: the same top latents and L0, the error column NaN") {
  const sae::SparseAutoencoder dictionary = sae::load(kSaes + "/saelens_jumprelu");
  const at::Tensor rows = at::randn({5, dictionary.d_in}) * 4;
  sae::LatentReading stored{&dictionary, SaeOutput::kLatents, 8, true};
  sae::LatentReading shown = stored;
  shown.measures_error = false;
  CHECK(shown.per_token(rows).size(1) == dictionary.d_sae);  // latents only: nothing decoded
  const at::Tensor full = stored.finish(stored.per_token(rows));
  const at::Tensor quick = shown.finish(shown.per_token(rows));
  REQUIRE(quick.sizes() == full.sizes());
  CHECK(at::equal(quick.narrow(1, 0, 17), full.narrow(1, 0, 17)));  // 8 indices, 8 values, the L0
  CHECK(at::isnan(quick.select(1, 17)).all().item<bool>());
  CHECK(at::isfinite(full.select(1, 17)).all().item<bool>());
}

TEST_CASE("an SAE's name is its folder's, its layout's tensors are checked, and it records what it is") {
  const sae::SparseAutoencoder gemma = sae::load(kSaes + "/gemma_scope/gemma-scope-2b-pt-res/layer_3/width_256/average_l0_20/");
  CHECK(gemma.name == "average_l0_20");
  CHECK(gemma.layout == "gemma_scope");
  CHECK_FALSE(gemma.subtract_decoder_bias);
  CHECK(sae::load(kSaes + "/saelens_topk", "mine").name == "mine");
  // Regression: a file of the folder names the folder, and so does a path ending in "." (the CI refused the path
  // ban replaced path arithmetic here).
  CHECK(sae::load(kSaes + "/saelens_topk/cfg.json").name == "saelens_topk");
  CHECK(sae::load(kSaes + "/saelens_topk/.").name == "saelens_topk");
  const Json record = sae::load(kSaes + "/saelens_topk").record();
  CHECK(record["architecture"] == "topk");
  CHECK(record["k"] == 8);
  CHECK(record["site"] == "resid_post");
  CHECK(record["layer"] == 3);
}

TEST_CASE("the .npz reader reads what NumPy's savez and savez_compressed write") {
  const auto stored = npz::read_file(kSaes + "/gemma_scope/gemma-scope-2b-pt-res/layer_3/width_256/average_l0_20/params.npz");
  const std::vector<int64_t> encoder_shape = {64, 256}, threshold_shape = {256};
  CHECK(stored.at("W_enc").shape == encoder_shape);
  CHECK(stored.at("threshold").shape == threshold_shape);
  // numpy_compressed.npz: np.savez_compressed(weights=(arange(12).reshape(3, 4) - 5.5) / 3 as f4, counts=arange(5) * 7
  // - 3 as i8, half=weights as f2).
  const auto compressed = npz::read_file(kSaes + "/numpy_compressed.npz");
  const npz::Array& weights = compressed.at("weights");
  const std::vector<int64_t> weights_shape = {3, 4};
  REQUIRE(weights.shape == weights_shape);
  const auto* values = reinterpret_cast<const float*>(weights.bytes.data());
  for (int i = 0; i < 12; ++i) CHECK(values[i] == static_cast<float>((i - 5.5) / 3));
  const auto* counts = reinterpret_cast<const int64_t*>(compressed.at("counts").bytes.data());
  CHECK(counts[4] == 25);
  CHECK(compressed.at("half").dtype == npz::DType::kF16);
  const std::string truncated = "PK\x03\x04 not a whole archive";
  CHECK_THROWS_WITH_AS(npz::read_bytes(reinterpret_cast<const uint8_t*>(truncated.data()), truncated.size(), "t.npz"),
                       doctest::Contains("t.npz: not a zip archive"), std::runtime_error);
}

namespace {

// A random SAE in Llama Scope's layout (d_model 64, 256 latents, layer 3's residual stream) with its tensors.
struct LlamaScopeFolder {
  at::Tensor encoder = at::randn({256, 64}) * 0.2, encoder_bias = at::randn({256}) * 0.1;
  at::Tensor decoder = at::randn({64, 256}) * 0.2, decoder_bias = at::randn({64}) * 0.1;
  double threshold = 0.3, average_norm = 20;
  Json hyperparams = {{"d_model", 64}, {"d_sae", 256}, {"act_fn", "jumprelu"}, {"jump_relu_threshold", 0.3},
                      {"hook_point_in", "blocks.3.hook_resid_post"}, {"hook_point_out", "blocks.3.hook_resid_post"},
                      {"norm_activation", "dataset-wise"}, {"dataset_average_activation_norm", {{"in", 20.0}, {"out", 20.0}}}};

  void write(const std::string& dir) const {
    make_directories(dir + "/checkpoints");
    probekit::testing::write_text(dir + "/hyperparams.json", hyperparams.dump());
    probekit::testing::write_fp32_tensors(dir + "/checkpoints/final.safetensors",
                                          {{"encoder.weight", encoder}, {"encoder.bias", encoder_bias},
                                           {"decoder.weight", decoder}, {"decoder.bias", decoder_bias}});
  }
};

}  // namespace

TEST_CASE("Llama Scope's layout reads as SAELens reads it: inputs scaled to the training norm, the scalar threshold"
          * doctest::test_suite("numeric")) {
  probekit::testing::TempDir tmp;
  const LlamaScopeFolder folder;
  const std::string dir = tmp.file("Llama3_1-8B-Base-L3R-8x");
  folder.write(dir);
  const sae::SparseAutoencoder dictionary = sae::load(dir + "/checkpoints/final.safetensors");
  CHECK(dictionary.layout == "llama_scope");
  CHECK(dictionary.name == "Llama3_1-8B-Base-L3R-8x");
  CHECK(dictionary.site == Site::kResidPost);
  CHECK(dictionary.layer == 3);
  CHECK(dictionary.record()["input_scaling"].get<double>() == doctest::Approx(8.0 / 20));
  // SAELens: W_enc = encoder.weight^T times s (folded), W_dec and b_dec over s, threshold jump_relu_threshold * s.
  const double s = std::sqrt(64.0) / folder.average_norm;
  const at::Tensor rows = at::randn({7, 64}) * 20;
  const at::Tensor h = at::matmul(rows, folder.encoder.t() * s) + folder.encoder_bias;
  const at::Tensor latents = h * (h > folder.threshold * s).to(at::kFloat);
  const at::Tensor reconstruction = at::matmul(latents, folder.decoder.t() / s) + folder.decoder_bias / s;
  REQUIRE(latents.gt(0).any().item<bool>());
  CHECK(worst_row_error(dictionary.encode(rows), latents) <= 1e-5);
  CHECK(worst_row_error(dictionary.decode(dictionary.encode(rows), rows), reconstruction) <= 1e-5);

  auto refused = [&](const std::string& name, const std::function<void(Json&)>& edit) {
    LlamaScopeFolder damaged;
    edit(damaged.hyperparams);
    damaged.write(tmp.file(name));
    return refusal(tmp.file(name));
  };
  CHECK_CONTAINS(refused("tc", [](Json& c) { c["hook_point_in"] = "blocks.3.ln2.hook_normalized"; }),
                 "a transcoder from ln2_normalized to resid_post is not read (read: mlp_in or ln2_normalized to mlp_out");
  CHECK_CONTAINS(refused("nooutnorm", [](Json& c) {
                   c["hook_point_in"] = "blocks.3.ln2.hook_normalized";
                   c["hook_point_out"] = "blocks.3.hook_mlp_out";
                   c["dataset_average_activation_norm"].erase("out");
                 }),
                 "dataset_average_activation_norm: missing 'out'");
  CHECK_CONTAINS(refused("topk", [](Json& c) { c["act_fn"] = "topk"; }), "hyperparams.json: act_fn 'topk' is not read");
  CHECK_CONTAINS(refused("tokenwise", [](Json& c) { c["norm_activation"] = "token-wise"; }),
                 "hyperparams.json: norm_activation 'token-wise' is not read (read: dataset-wise)");
  CHECK_CONTAINS(refused("nonorm", [](Json& c) { c.erase("dataset_average_activation_norm"); }),
                 "'dataset_average_activation_norm' must be an object");
  CHECK_CONTAINS(refused("zero", [](Json& c) { c["dataset_average_activation_norm"]["in"] = 0; }),
                 "dataset_average_activation_norm.in is 0, expected a positive number");
  CHECK_CONTAINS(refused("nothreshold", [](Json& c) { c.erase("jump_relu_threshold"); }),
                 "hyperparams.json: missing 'jump_relu_threshold'");
  CHECK_CONTAINS(refused("wide", [](Json& c) { c["d_sae"] = 512; }),
                 "final.safetensors: tensor 'encoder.weight' has shape [256, 64], expected [512, 64]");
}

TEST_CASE("Llama Scope's transcoders (LXTC) reconstruct mlp_out on its own scale: over sqrt(d_model) / its average norm"
          * doctest::test_suite("numeric")) {
  probekit::testing::TempDir tmp;
  LlamaScopeFolder folder;
  folder.hyperparams["hook_point_in"] = "blocks.3.ln2.hook_normalized";
  folder.hyperparams["hook_point_out"] = "blocks.3.hook_mlp_out";
  folder.hyperparams["dataset_average_activation_norm"] = {{"in", 20.0}, {"out", 5.0}};
  const std::string dir = tmp.file("Llama3_1-8B-Base-L3TC-8x");
  folder.write(dir);
  const sae::SparseAutoencoder dictionary = sae::load(dir);
  CHECK(dictionary.site == Site::kLn2Normalized);  // the norm's output before its weight, not mlp_in
  CHECK(dictionary.output_site == Site::kMlpOut);
  const double s_in = std::sqrt(64.0) / 20, s_out = std::sqrt(64.0) / 5;
  const at::Tensor rows = at::randn({7, 64}) * 20;
  const at::Tensor h = at::matmul(rows * s_in, folder.encoder.t()) + folder.encoder_bias;
  const at::Tensor latents = h * (h > folder.threshold * s_in).to(at::kFloat);
  REQUIRE(latents.gt(0).any().item<bool>());
  CHECK(worst_row_error(dictionary.encode(rows), latents) <= 1e-5);
  const at::Tensor reconstruction = (at::matmul(latents, folder.decoder.t()) + folder.decoder_bias) / s_out;
  CHECK(worst_row_error(dictionary.decode(latents, rows), reconstruction) <= 1e-5);
  CHECK(dictionary.record()["output_scale"].get<double>() == doctest::Approx(s_out));
}

TEST_CASE("SAEs that cannot be read are refused naming the file and the field") {
  probekit::testing::TempDir tmp;
  auto variant = [&](const std::string& name, const std::function<void(Json&)>& edit) { return sae_variant(tmp, name, edit); };
  CHECK_CONTAINS(refusal(variant("arch", [](Json& c) { c["architecture"] = "matryoshka"; })),
                 "cfg.json: architecture 'matryoshka' is not read");
  CHECK_CONTAINS(refusal(variant("norm", [](Json& c) { c["normalize_activations"] = "layer_norm"; })),
                 "normalize_activations 'layer_norm' is not read");
  CHECK_CONTAINS(refusal(variant("hookz", [](Json& c) { c["metadata"]["hook_name"] = "blocks.3.attn.hook_z"; })),
                 "per-head output (hook_z)");
  CHECK_CONTAINS(refusal(variant("width", [](Json& c) { c["d_in"] = 65; })),
                 "sae_weights.safetensors: tensor 'W_enc' has shape [64, 256], expected [65, 256]");
  CHECK_CONTAINS(refusal(variant("transcoder", [](Json& c) { c["d_out"] = 64; })),
                 "cfg.json: 'd_out' is a transcoder's, but the architecture 'standard' is an SAE's");
  CHECK_CONTAINS(refusal(variant("bdec", [](Json& c) {
                   c["architecture"] = "transcoder";
                   c["d_out"] = 64;
                   c["metadata"]["hook_name"] = "blocks.3.ln2.hook_normalized";
                   c["metadata"]["hook_name_out"] = "blocks.3.hook_mlp_out";
                 })),
                 "a transcoder cannot subtract b_dec (the output's bias) from its input");
  CHECK_CONTAINS(refusal(variant("noout", [](Json& c) { c["architecture"] = "skip_transcoder"; c["d_out"] = 64; })),
                 "cfg.json: missing 'hook_name_out'");
  CHECK_CONTAINS(refusal(variant("twolayers", [](Json& c) {
                   c["architecture"] = "transcoder";
                   c["d_out"] = 64;
                   c["apply_b_dec_to_input"] = false;
                   c["metadata"]["hook_name"] = "blocks.3.ln2.hook_normalized";
                   c["metadata"]["hook_name_out"] = "blocks.4.hook_mlp_out";
                 })),
                 "cfg.json: the transcoder reads layer 3 and reconstructs layer 4 ('blocks.4.hook_mlp_out')");
  // Regression: a field left out read "'d_sae' must be a whole number", and a hook left out did not name hook_point.
  CHECK_CONTAINS(refusal(variant("nohook", [](Json& c) { c["metadata"].erase("hook_name"); })),
                 "cfg.json: missing 'metadata.hook_name' (or, in configs before SAELens 6.0, a top-level 'hook_name' or "
                 "'hook_point')");
  CHECK_CONTAINS(refusal(variant("nowidth", [](Json& c) { c.erase("d_sae"); })), "cfg.json: missing 'd_sae'");
  CHECK_CONTAINS(refusal(variant("list", [](Json& c) { c = Json::array({1, 2, 3}); })),
                 "cfg.json: expected a JSON object (the SAE's config), got array");
  CHECK_CONTAINS(refusal(variant("bigk", [](Json& c) {
                   c["architecture"] = "topk";
                   c["k"] = 100000;
                 })),
                 "TopK's k is 100000, but the dictionary has 256 latents");
  CHECK_CONTAINS(refusal(tmp.path()), "no SAE layout recognised");
}

TEST_CASE("SAE weights, paths and layers that cannot be read are refused naming the file and the tensor") {
  probekit::testing::TempDir tmp;
  auto variant = [&](const std::string& name, const std::function<void(Json&)>& edit) { return sae_variant(tmp, name, edit); };
  // Regression: a NaN in a dictionary was blamed on the model's checkpoint once it reached the activations.
  const std::string nan = variant("nan", [](Json&) {});
  probekit::testing::set_first_element(nan + "/sae_weights.safetensors", "W_dec", std::nanf(""));
  CHECK_CONTAINS(refusal(nan), "nan: W_dec holds NaN or Inf (first at flat index 0 of [256, 64])");
  // Regression: a Gemma Scope path naming a layer past int64 threw std::stoll's out_of_range ("stoll").
  const std::string huge_layer = tmp.file("layer_99999999999999999999/width_256/average_l0_20");
  probekit::testing::copy_dir(kSaes + "/gemma_scope/gemma-scope-2b-pt-res/layer_3/width_256/average_l0_20", huge_layer);
  CHECK_CONTAINS(refusal(huge_layer), "Gemma Scope's path names the layer");
  // Fuzz regression (fuzz_sae_files): a flag of another type threw the JSON library's own type error, naming nothing.
  CHECK_CONTAINS(refusal(variant("flag", [](Json& c) { c["apply_b_dec_to_input"] = "yes"; })),
                 "cfg.json: 'apply_b_dec_to_input' must be true or false, got \"yes\"");
  CHECK(sae::load(variant("nullflag", [](Json& c) { c["apply_b_dec_to_input"] = nullptr; })).subtract_decoder_bias);
  // Regression: a layer number past int64 threw std::stoll's out_of_range ("stoll"), naming nothing.
  CHECK_CONTAINS(refusal(variant("layer", [](Json& c) { c["metadata"]["hook_name"] = "blocks.99999999999999999999.hook_resid_post"; })),
                 "cfg.json: hook 'blocks.99999999999999999999.hook_resid_post' names layer 99999999999999999999");
  const sae::SparseAutoencoder standard = sae::load(kSaes + "/saelens_standard");
  CHECK_THROWS_WITH_AS(standard.encode(at::zeros({2, 63})), doctest::Contains("expected [rows, 64]"), std::invalid_argument);
  // Regression: with no architecture (standard) a d_out read a missing key (undefined behaviour), naming nothing.
  CHECK_CONTAINS(refusal(variant("noarch", [](Json& c) {
                   c.erase("architecture");
                   c["d_out"] = 64;
                 })),
                 "cfg.json: 'd_out' is a transcoder's, but the architecture 'standard' is an SAE's");
  // Regression: FP8 weights were read as their raw bytes (0x38, 1.0 in e4m3, as 56).
  const std::string fp8 = variant("fp8", [](Json&) {});
  {
    const safetensors::File fixture(kSaes + "/saelens_standard/sae_weights.safetensors");
    std::vector<at::Tensor> kept;
    std::vector<safetensors::TensorData> data;
    for (const safetensors::TensorInfo& info : fixture.tensors()) {
      const bool encoder = info.name == "W_enc";
      kept.push_back(encoder ? at::full(info.shape, 0x38, at::kByte) : probekit::testing::read_tensor(fixture, info));
      data.push_back({info.name, encoder ? safetensors::DType::kF8E4M3 : info.dtype, info.shape, kept.back().data_ptr(),
                      kept.back().nbytes()});
    }
    safetensors::write_file(fp8 + "/sae_weights.safetensors", data);
  }
  CHECK_CONTAINS(refusal(fp8), "sae_weights.safetensors: tensor 'W_enc' is F8_E4M3: SAE weights are read in F64, F32");
}

namespace {

// A copy of fixture SAE `fixture` whose cfg.json `edit` changed, at tmp/`name` (sparsify's: its layers.3 folder).
std::string edited_copy(const probekit::testing::TempDir& tmp, const std::string& fixture, const std::string& name,
                        const std::function<void(Json&)>& edit) {
  const bool sparsify = fixture == "sparsify";
  const std::string dir = tmp.file(sparsify ? name + "/layers.3" : name);
  probekit::testing::copy_dir(kSaes + "/" + fixture + (sparsify ? "/layers.3" : ""), dir);
  Json config = read_json_file(dir + "/cfg.json");
  edit(config);
  probekit::testing::write_text(dir + "/cfg.json", config.dump());
  return dir;
}

}  // namespace

TEST_CASE("SAELens configs from before 6.0 read as SAELens reads them: TopK under activation_fn_str, hook_point") {
  probekit::testing::TempDir tmp;
  const sae::SparseAutoencoder topk = sae::load(kSaes + "/saelens_topk");
  const at::Tensor rows = at::randn({5, 64}, at::TensorOptions().dtype(at::kFloat)) * 3;
  // Regression: architecture "standard" with activation_fn_str "topk" kept every positive latent (ReLU).
  const sae::SparseAutoencoder legacy = sae::load(edited_copy(tmp, "saelens_topk", "legacy", [](Json& c) {
    c["architecture"] = "standard";
    c["activation_fn_str"] = "topk";
    c["activation_fn_kwargs"] = {{"k", 8}};
    c.erase("k");
  }));
  CHECK(legacy.architecture == sae::Architecture::kTopK);
  CHECK(legacy.k == 8);
  CHECK(at::equal(legacy.encode(rows), topk.encode(rows)));
  CHECK(((legacy.encode(rows) > 0).sum(1) <= 8).all().item<bool>());
  // Regression: "topk" with k only in activation_fn_kwargs was refused.
  const sae::SparseAutoencoder kwargs = sae::load(edited_copy(tmp, "saelens_topk", "kwargs", [](Json& c) {
    c["activation_fn"] = "topk";
    c["activation_fn_kwargs"] = {{"k", 8}};
    c.erase("k");
  }));
  CHECK(at::equal(kwargs.encode(rows), topk.encode(rows)));
  // The oldest configs: no architecture (standard) and the hook as hook_point.
  const sae::SparseAutoencoder oldest = sae::load(edited_copy(tmp, "saelens_standard", "oldest", [](Json& c) {
    c.erase("architecture");
    c["hook_point"] = c["metadata"]["hook_name"];
    c["metadata"].erase("hook_name");
  }));
  CHECK(oldest.architecture == sae::Architecture::kStandard);
  CHECK(oldest.site == Site::kResidPost);
  CHECK(oldest.layer == 3);
  CHECK(at::equal(oldest.encode(rows), sae::load(kSaes + "/saelens_standard").encode(rows)));
}

TEST_CASE("what an SAE's config asks for that is not read is refused, not read as something else") {
  probekit::testing::TempDir tmp;
  auto refused = [&](const std::string& fixture, const std::string& name, const std::function<void(Json&)>& edit) {
    return refusal(edited_copy(tmp, fixture, name, edit));
  };
  CHECK_CONTAINS(refused("saelens_standard", "tanh", [](Json& c) { c["activation_fn_str"] = "tanh-relu"; }),
                 "cfg.json: 'activation_fn_str' is 'tanh-relu' with architecture 'standard', which is not read");
  CHECK_CONTAINS(refused("saelens_jumprelu", "jumptopk", [](Json& c) { c["activation_fn"] = "topk"; }),
                 "'activation_fn' is 'topk' with architecture 'jumprelu'");
  // Regression: training checkpoints' unfolded scalings were ignored.
  CHECK_CONTAINS(refused("saelens_standard", "scaling", [](Json& c) { c["finetuning_scaling_factor"] = true; }),
                 "'finetuning_scaling_factor' is true");
  CHECK_CONTAINS(refused("saelens_topk", "rescale", [](Json& c) { c["rescale_acts_by_decoder_norm"] = true; }),
                 "'rescale_acts_by_decoder_norm' is true");
  // Regression: k of 0 gave all-zero latents, k of -1 LibTorch's "selected index k out of range".
  for (int k : {0, -1}) {
    CAPTURE(k);
    CHECK_CONTAINS(refused("saelens_topk", "k" + std::to_string(k + 1), [k](Json& c) { c["k"] = k; }),
                   fmt::format("TopK's k is {}, expected 1 or more", k));
    CHECK_CONTAINS(refused("sparsify", "sparsify_k" + std::to_string(k + 1), [k](Json& c) { c["k"] = k; }),
                   fmt::format("TopK's k is {}, expected 1 or more", k));
  }
  // Regression: sparsify's groupmax activation was encoded as TopK.
  CHECK_CONTAINS(refused("sparsify", "groupmax", [](Json& c) { c["activation"] = "groupmax"; }),
                 "cfg.json: activation 'groupmax' is not read (read: topk)");
  CHECK(sae::load(edited_copy(tmp, "sparsify", "topk", [](Json& c) { c["activation"] = "topk"; })).k == 8);
  // Regression: fields of another type were read as left out (no normalisation, no transcoder, no skip connection).
  CHECK_CONTAINS(refused("saelens_norm_rescale", "norm5", [](Json& c) { c["normalize_activations"] = 5; }),
                 "cfg.json: 'normalize_activations' must be a string, got 5");
  CHECK_CONTAINS(refused("sparsify", "transcode", [](Json& c) { c["transcode"] = "true"; }),
                 "cfg.json: 'transcode' must be true or false, got \"true\"");
  CHECK_CONTAINS(refused("sparsify", "skip", [](Json& c) { c["skip_connection"] = "yes"; }),
                 "cfg.json: 'skip_connection' must be true or false, got \"yes\"");
  const std::string scope2 = tmp.file("scope2/resid_post/layer_3_width_256_l0_small");
  probekit::testing::copy_dir(kSaes + "/gemma_scope_2/resid_post/layer_3_width_256_l0_small", scope2);
  Json config = read_json_file(scope2 + "/config.json");
  config["affine_connection"] = "true";
  probekit::testing::write_text(scope2 + "/config.json", config.dump());
  CHECK_CONTAINS(refusal(scope2), "config.json: 'affine_connection' must be true or false, got \"true\"");
}

TEST_CASE("TopK keeps the lower indices of latents tied at its k-th value") {
  // Every latent the same: the first k are kept (regression: at::topk kept latents 168 to 175).
  sae::SparseAutoencoder same = sae::load(kSaes + "/saelens_topk");
  const at::Tensor column = same.w_enc.select(1, 0);
  same.w_enc = column.unsqueeze(1).repeat({1, same.d_sae}).contiguous();
  same.b_enc = at::zeros_like(same.b_enc);
  same.subtract_decoder_bias = false;
  at::Tensor rows = at::randn({4, same.d_in});
  rows = rows * at::sign(at::matmul(rows, column)).unsqueeze(1);  // each row's shared value positive
  const at::Tensor latents = same.encode(rows);
  for (int64_t r = 0; r < rows.size(0); ++r) {
    CAPTURE(r);
    CHECK(at::equal(latents[r].nonzero().view(-1), at::arange(same.k, at::kLong)));
  }
  // Ties past the k-th value are kept whole; at it, the lower ones fill k.
  const at::Tensor h = at::tensor({1.0f, 3.0f, 2.0f, 2.0f, 3.0f, 2.0f});
  same.d_in = 6;
  same.d_sae = 6;
  same.k = 3;
  same.w_enc = at::eye(6);
  same.b_enc = at::zeros({6});
  CHECK(at::equal(same.encode(h.unsqueeze(0))[0], at::tensor({0.0f, 3.0f, 2.0f, 0.0f, 3.0f, 0.0f})));
}

TEST_CASE("Gemma Scope's site comes from the release's folder, and a path without one is refused") {
  probekit::testing::TempDir tmp;
  const std::string fixture = kSaes + "/gemma_scope/gemma-scope-2b-pt-res/layer_3/width_256/average_l0_20";
  auto copied = [&](const std::string& path) {
    probekit::testing::copy_dir(fixture, tmp.file(path));
    return tmp.file(path);
  };
  CHECK(sae::load(copied("gemma-scope-9b-pt-res-canonical/layer_3/width_256/average_l0_20")).site == Site::kResidPost);
  CHECK(sae::load(copied("models--google--gemma-scope-2b-pt-mlp/snapshots/0a1b/layer_3/width_256/average_l0_20")).site ==
        Site::kMlpOut);
  CHECK(sae::load(copied("gemma-scope-2b-pt-transcoders/layer_3/width_256/average_l0_20")).site == Site::kLn2Normalized);
  // Regression: a folder without the release's name was read as resid_post, whatever the SAE's site.
  CHECK_CONTAINS(refusal(copied("gs/layer_3/width_256/average_l0_20")),
                 "Gemma Scope's files name no site: it comes from the release's folder");
  // Regression: "-att" anywhere in the path (my-attic) made it an attention SAE.
  CHECK(sae::load(copied("my-attic/gemma-scope-2b-pt-res/layer_3/width_256/average_l0_20")).site == Site::kResidPost);
  CHECK_CONTAINS(refusal(copied("gemma-scope-2b-pt-att/layer_3/width_256/average_l0_20")), "attention SAE (-att)");
  // Regression: a relative path ("." inside the folder) was refused as naming no layer.
  const std::string inside = copied("gemma-scope-2b-pt-mlp/layer_3/width_256/average_l0_20");
  const std::string here = absolute_path(".");
  REQUIRE(chdir(inside.c_str()) == 0);
  const std::string dot = refusal(".");
  const std::string file = refusal("params.npz");
  REQUIRE(chdir(here.c_str()) == 0);
  CHECK(dot == "loaded");
  CHECK(file == "loaded");
}

TEST_CASE("a folder holding two layouts' files is read as the one whose file is given, else refused") {
  probekit::testing::TempDir tmp;
  const std::string both = tmp.file("both/layers.3");  // sparsify's hookpoint
  probekit::testing::copy_dir(kSaes + "/saelens_topk", both);
  probekit::testing::write_text(both + "/sae.safetensors", probekit::testing::read_text(kSaes + "/sparsify/layers.3/sae.safetensors"));
  CHECK_CONTAINS(refusal(both), "layers.3: holds the files of 2 SAE layouts: give the file of the one to read: ");
  CHECK_CONTAINS(refusal(both), "/sae_weights.safetensors (saelens), ");
  CHECK(sae::load(both + "/sae_weights.safetensors").layout == "saelens");
  CHECK(sae::load(both + "/sae.safetensors").layout == "sparsify");
}
