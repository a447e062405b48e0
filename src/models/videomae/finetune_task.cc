// VideoMAE fine-tuning on the one training loop (see videomae_finetune_task.h).
#include "models/videomae/finetune_task.h"

#include <algorithm>
#include <cstdio>

#include "data/rng.h"
#include "unmask/dist.h"
#include "unmask/error.h"
#include "models/videomae/flops.h"

namespace unmask::video {

VideoMAEFinetuneTask::VideoMAEFinetuneTask(const VideoMAEFinetuneSettings& settings, Context& /*ctx: the CPU*/,
                                           const ClipLoaderOptions& loader_options,
                                           const std::function<ClipLoader(const ClipLoaderOptions&)>& open_loader,
                                           const train::LoopStart& start)
    : s_(settings) {
  Communicator& comm = Communicator::world();
  world_ = comm.size(), rank_ = comm.rank();
  const VideoMAEConfig& c = s_.config;
  model_.emplace(VideoMAEClassifier::random(c, s_.num_classes, s_.seed));
  if (!start.resume_dir.empty()) {
    load_videomae(train::checkpoint_model_dir(start.resume_dir), c, model_->params());  // every tensor, head included
    auto it = start.resumed.data.find("clip_batches");
    if (it == start.resumed.data.end())
      throw Error("the checkpoint ", start.resume_dir, " records no clip-loader position (data.clip_batches)",
                  Hint("it was not written by finetune-video; resume a finetune-video run"));
    batches_consumed_ = it->second;
  } else if (!s_.init_from.empty()) {
    VideoMAELoadOptions lo;
    lo.allow_missing_prefixes = {"head.", "fc_norm."};
    const LoadReport r = load_videomae(s_.init_from, c, model_->params(), lo);
    if (comm.is_root()) std::fprintf(stderr, "%s\n", r.summary().c_str());
  }
  model_->set_layer_decay(s_.layer_decay);
  ClipLoaderOptions lo = loader_options;
  lo.start_batch = batches_consumed_;
  loader_.emplace(open_loader(lo));
  if (loader_->batches_per_epoch() < 1)
    throw Error("--data has ", loader_->size(), " videos, fewer than one --batch of ", s_.batch);
  VideoMAEFlopConfig fc;
  fc.img_size = c.img_size, fc.frames = c.num_frames, fc.tubelet = c.tubelet, fc.patch = c.patch;
  fc.enc_dim = c.dim, fc.enc_depth = c.depth, fc.enc_heads = c.heads, fc.enc_mlp_hidden = c.mlp_hidden(c.dim);
  fc.num_classes = s_.num_classes;
  fc.batch = s_.batch;
  micro_flops_ = videomae_finetune_step_flops(fc);
}

std::string VideoMAEFinetuneTask::title() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: VideoMAE %s fine-tuning, %lld classes, batch %lld, layer decay %.2f, mixup %.1f / cutmix %.1f",
                s_.output.c_str(), s_.preset.c_str(), (long long)s_.num_classes, (long long)(s_.batch * world_),
                double(s_.layer_decay), double(s_.mixup), double(s_.cutmix));
  return buf;
}

void VideoMAEFinetuneTask::zero_grad(Context& ctx) {
  model_->zero_grad(ctx);
  loss_sum_ = lam_sum_ = 0;
  rows_ = hits_ = micro_ = 0;
}

double VideoMAEFinetuneTask::micro_batch(Context& ctx, const train::MicroBatchOptions& mo) {
  if (!loader_->next(batch_) && !loader_->next(batch_))
    throw Error("the clip loader produced no batch in a whole epoch",
                Hint("the data has fewer videos than --batch (drop_last), or every video was skipped"));
  ++batches_consumed_;
  epoch_ = batch_.epoch;
  const int64_t B = batch_.videos.size(0), K = s_.num_classes;
  const int64_t global_batch = s_.batch * world_, first_clip = rank_ * s_.batch;  // this rank's rows of the batch
  const uint64_t micro = uint64_t(mo.step * mo.accumulation + mo.micro);  // = the step without accumulation
  MixupOptions mx;
  mx.mixup_alpha = s_.mixup, mx.cutmix_alpha = s_.cutmix, mx.label_smoothing = s_.smoothing;
  const uint64_t mix_key =
      world_ > 1 ? data::derive_key(s_.seed, {micro, uint64_t(rank_)}) : data::derive_key(s_.seed, {micro});
  const MixupResult mix = mixup_cutmix(batch_.videos, batch_.labels, K, mx, mix_key);
  VideoMAEClassifyOptions co;
  co.drop_path_rate = s_.drop_path;
  co.head_dropout = s_.head_dropout;
  co.seed = s_.seed;
  co.step = micro;
  co.first_clip = first_clip;
  co.loss_scale = mo.loss_scale * float(double(B) / double(global_batch));  // the ranks' gradients add up to the mean
  const VideoMAEClassifyStats st = model_->step(ctx, batch_.videos, mix.targets, co);
  const Tensor logits = st.logits.device() == Device::cpu ? st.logits : st.logits.to(Device::cpu);
  for (int64_t r = 0; r < B; ++r) {  // training accuracy on the (mixed) batch, against the clip's own label
    const float* z = logits.data<float>() + r * K;
    hits_ += std::max_element(z, z + K) - z == batch_.labels[size_t(r)];
  }
  loss_sum_ += st.loss * double(B);
  lam_sum_ += mix.lam;
  rows_ += B;
  ++micro_;
  return micro_flops_ * double(B) / double(s_.batch);
}

train::StepSummary VideoMAEFinetuneTask::finish_step() {
  // Over the ranks: loss x rows, rows, hits, mixing weights and micro-batches.
  double t[5] = {loss_sum_, double(rows_), double(hits_), lam_sum_, double(micro_)};
  if (world_ > 1) Communicator::world().allreduce_sum(t, 5, "the step's loss and accuracy");
  train::StepSummary s;
  s.loss = t[1] > 0 ? t[0] / t[1] : 0;  // every micro-batch has the same rows: the mean of their means
  s.accuracy = t[1] > 0 ? t[2] / t[1] : 0;
  s.samples = int64_t(t[1]);
  s.tokens = s.samples * s_.config.num_patches();
  s.extras = {{"epoch", double(epoch_)}, {"mix_lam", t[4] > 0 ? t[3] / t[4] : 1.0}};
  return s;
}

void VideoMAEFinetuneTask::save_model(const std::string& dir) {
  save_videomae(dir, s_.config, model_->params(), s_.naming, s_.num_classes, s_.class_names);
}

void VideoMAEFinetuneTask::save_data_state(train::TrainerState& state) { state.data["clip_batches"] = batches_consumed_; }

std::string VideoMAEFinetuneTask::closing_note() { return loader_summary(loader_->times()); }

}  // namespace unmask::video
