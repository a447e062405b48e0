// VideoMAE pretraining on the one training loop (see videomae_pretrain_task.h).
#include "models/videomae/pretrain_task.h"

#include <cstdio>

#include "unmask/dist.h"
#include "unmask/error.h"
#include "models/videomae/flops.h"

namespace unmask::video {

VideoMAEPretrainTask::VideoMAEPretrainTask(const VideoMAEPretrainSettings& settings, Context& ctx,
                                           const ClipLoaderOptions& loader_options,
                                           const std::function<ClipLoader(const ClipLoaderOptions&)>& open_loader,
                                           const train::LoopStart& start, int64_t accumulation)
    : s_(settings), accumulation_(accumulation) {
  Communicator& comm = Communicator::world();
  world_ = comm.size(), rank_ = comm.rank();
  const VideoMAEConfig& c = s_.config;
  grid_ = TokenGrid{c.grid_t(), c.grid_hw(), c.grid_hw()};
  tube_masked_per_frame(grid_, s_.mask_ratio);  // validates the ratio
  if (s_.decoder_mask_ratio > 0) running_cell_masked_per_cell(s_.decoder_mask_ratio);

  // Weights: the checkpoint resumed from, else --init-from, else VideoMAE's init from the seed.
  model_.emplace(VideoMAEPretrainModel::random(c, s_.seed));
  const std::string weights = !start.resume_dir.empty() ? train::checkpoint_model_dir(start.resume_dir) : s_.init_from;
  if (!weights.empty()) {
    const LoadReport r = load_videomae(weights, c, model_->params());
    if (comm.is_root() && start.resume_dir.empty()) std::fprintf(stderr, "%s\n", r.summary().c_str());
  }
  model_->to(ctx);  // no-op on the CPU; before the gradient sync and the optimizer take the params

  if (!start.resume_dir.empty()) {
    auto it = start.resumed.data.find("clip_batches");
    if (it == start.resumed.data.end())
      throw Error("the checkpoint ", start.resume_dir, " records no clip-loader position (data.clip_batches)",
                  Hint("it was not written by pretrain-video; resume a pretrain-video run"));
    batches_consumed_ = it->second;
  }
  ClipLoaderOptions lo = loader_options;
  lo.start_batch = batches_consumed_;
  loader_.emplace(open_loader(lo));

  VideoMAEFlopConfig fc;
  fc.img_size = c.img_size, fc.frames = c.num_frames, fc.tubelet = c.tubelet, fc.patch = c.patch;
  fc.enc_dim = c.dim, fc.enc_depth = c.depth, fc.enc_heads = c.heads, fc.enc_mlp_hidden = c.mlp_hidden(c.dim);
  fc.dec_dim = c.decoder_dim, fc.dec_depth = c.decoder_depth, fc.dec_heads = c.decoder_heads;
  fc.dec_mlp_hidden = c.mlp_hidden(c.decoder_dim);
  fc.mask_ratio = s_.mask_ratio;
  fc.decoder_mask_ratio = s_.decoder_mask_ratio;
  fc.batch = s_.batch;
  micro_flops_ = videomae_pretrain_step_flops(fc);
}

std::string VideoMAEPretrainTask::title() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: VideoMAE %s (dim %lld, depth %lld), %lld x %lld^2, tube mask %.2f, batch %lld x %lld",
                s_.output.c_str(), s_.preset.c_str(), (long long)s_.config.dim, (long long)s_.config.depth,
                (long long)s_.config.num_frames, (long long)s_.config.img_size, s_.mask_ratio,
                (long long)(s_.batch * world_), (long long)accumulation_);
  return buf;
}

void VideoMAEPretrainTask::zero_grad(Context& ctx) {
  model_->zero_grad(ctx);
  loss_sum_ = 0;
  rows_ = 0;
}

double VideoMAEPretrainTask::micro_batch(Context& ctx, const train::MicroBatchOptions& mo) {
  // The next batch, starting a new epoch at the end of one.
  if (!loader_->next(batch_) && !loader_->next(batch_))
    throw Error("the clip loader produced no batch in a whole epoch",
                Hint("the data has fewer videos than --batch (drop_last), or every video was skipped"));
  ++batches_consumed_;
  const int64_t B = s_.batch * world_;  // the global batch; this rank holds its rows [row0, row1)
  const int64_t row0 = rank_ * s_.batch, row1 = row0 + batch_.videos.size(0);
  const uint64_t first_clip = uint64_t((mo.step * mo.accumulation + mo.micro) * B + row0);
  const Tensor mask = tube_mask_batch(grid_, s_.mask_ratio, s_.seed, first_clip, row1 - row0);
  VideoMAEStepOptions so;
  so.activations = s_.activations;
  if (s_.decoder_mask_ratio > 0)
    so.decoder_mask = running_cell_mask_batch(grid_, s_.decoder_mask_ratio, s_.seed, first_clip, row1 - row0);
  so.loss_scale = mo.loss_scale * float(double(row1 - row0) / double(B));  // the ranks' gradients add up to the batch mean's
  so.grads_ready = mo.grads_ready;
  const Device device = ctx.device();
  const VideoMAEStepStats st =
      model_->pretrain_step(ctx, device == Device::cpu ? batch_.videos : batch_.videos.to(device), mask, so);
  loss_sum_ += st.loss * double(row1 - row0);
  rows_ += row1 - row0;
  return micro_flops_ * double(row1 - row0) / double(s_.batch);
}

train::StepSummary VideoMAEPretrainTask::finish_step() {
  double t[2] = {loss_sum_, double(rows_)};
  if (world_ > 1) Communicator::world().allreduce_sum(t, 2, "the step loss");
  train::StepSummary s;
  s.loss = t[1] > 0 ? t[0] / t[1] : 0;  // every micro-batch has the same rows: the mean of their means
  s.samples = int64_t(t[1]);
  s.tokens = s.samples * grid_.tokens();
  return s;
}

void VideoMAEPretrainTask::save_model(const std::string& dir) { save_videomae(dir, s_.config, model_->params(), s_.naming); }

void VideoMAEPretrainTask::save_data_state(train::TrainerState& state) {
  state.data["clip_batches"] = batches_consumed_;
}

std::string VideoMAEPretrainTask::closing_note() { return loader_summary(loader_->times()); }

}  // namespace unmask::video
