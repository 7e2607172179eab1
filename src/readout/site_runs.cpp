// Runs of one sequence for activation patching: a recorded run (its values at sites of every layer, and its logits)
// and many rows of the same sequence, each with its own writes, read at the last token's logits.
#include <ATen/core/grad_mode.h>

#include "common/error.h"
#include "readout/readout.h"

namespace probekit::readout {

namespace {

at::Tensor batch_of(const Sequence& ids, int64_t rows, at::Device device) {
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).to(device).unsqueeze(0).expand({rows, -1});
}

void check_runnable(const model::TransformerModel& model, const Sequence& ids) {
  if (ids.empty()) fail_input("an empty text has no next token to read");
  if (!model.has_lm_head()) fail_input("reading logits needs the LM head loaded");
  model.check_inputs(ids);
}

}  // namespace

SiteRun read_site_run(const model::TransformerModel& model, const Sequence& ids, const std::vector<Site>& sites,
                      const model::StreamWrites* writes, bool gradients) {
  check_runnable(model, ids);
  SiteRun run;
  uint32_t hook_sites = 0;
  for (Site site : sites) {
    if (!site_row(site).writable() || site == Site::kEmbeddings) {
      fail_input("a run is read at decoder sites that take writes, not at {}", site_name(site));
    }
    hook_sites |= site_bit(site);
    run.values[site].resize(static_cast<size_t>(model.loaded_layers()));
  }
  model::TensorHook hook = [&](Site site, int64_t layer, const at::Tensor& t) {
    run.values[site][static_cast<size_t>(layer)] = t[0].detach();
  };
  model::ForwardPass pass;
  pass.input_ids = batch_of(ids, 1, model.device());
  pass.final_norm = true;
  pass.hook = &hook;
  pass.hook_sites = hook_sites;
  pass.writes = writes;
  pass.gradients = gradients;
  at::Tensor out = model.forward(pass);
  at::AutoGradMode gradient_mode(gradients);
  run.logits = model.logits(out.select(1, out.size(1) - 1))[0];
  return run;
}

at::Tensor read_last_logits(const model::TransformerModel& model, const Sequence& ids, int64_t rows,
                            const model::StreamWrites& writes) {
  check_runnable(model, ids);
  model::ForwardPass pass;
  pass.input_ids = batch_of(ids, rows, model.device());
  pass.final_norm = true;
  pass.writes = &writes;
  at::Tensor out = model.forward(pass);
  return model.logits(out.select(1, out.size(1) - 1));
}

}  // namespace probekit::readout
