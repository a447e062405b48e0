// train/clip_classify_task.cc: see clip_classify_task.h.
#include "train/clip_classify_task.h"

#include <algorithm>

#include "data/rng.h"
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask::train {

ClipClassifyTask::ClipClassifyTask(const ClipClassifySettings& settings) : c_(settings) {
  Communicator& comm = Communicator::world();
  world_ = comm.size(), rank_ = comm.rank();
}

void ClipClassifyTask::open_data(const video::ClipLoaderOptions& loader_options,
                                 const std::function<video::ClipLoader(const video::ClipLoaderOptions&)>& open_loader,
                                 const LoopStart& start, const char* command) {
  if (!start.resume_dir.empty()) {
    auto it = start.resumed.data.find("clip_batches");
    if (it == start.resumed.data.end())
      throw Error("the checkpoint ", start.resume_dir, " records no clip-loader position (data.clip_batches)",
                  Hint(std::string("it was not written by ") + command + "; resume a " + command + " run"));
    batches_consumed_ = it->second;
  }
  video::ClipLoaderOptions lo = loader_options;
  lo.start_batch = batches_consumed_;
  loader_.emplace(open_loader(lo));
  if (loader_->batches_per_epoch() < 1)
    throw Error("--data has ", loader_->size(), " videos, fewer than one --batch of ", c_.batch);
}

void ClipClassifyTask::zero_grad(Context& ctx) {
  zero_model_grad(ctx);
  loss_sum_ = lam_sum_ = 0;
  rows_ = hits_ = micro_ = 0;
}

double ClipClassifyTask::micro_batch(Context& ctx, const MicroBatchOptions& mo) {
  if (!loader_->next(batch_) && !loader_->next(batch_))
    throw Error("the clip loader produced no batch in a whole epoch",
                Hint("the data has fewer videos than --batch (drop_last), or every video was skipped"));
  ++batches_consumed_;
  epoch_ = batch_.epoch;
  const int64_t B = batch_.videos.size(0), K = c_.num_classes;
  const int64_t global_batch = c_.batch * world_, first_clip = rank_ * c_.batch;  // this rank's rows of the batch
  const uint64_t micro = uint64_t(mo.step * mo.accumulation + mo.micro);  // = the step without accumulation
  MixupOptions mx;
  mx.mixup_alpha = c_.mixup, mx.cutmix_alpha = c_.cutmix, mx.label_smoothing = c_.smoothing;
  const uint64_t mix_key =
      world_ > 1 ? data::derive_key(c_.seed, {micro, uint64_t(rank_)}) : data::derive_key(c_.seed, {micro});
  const MixupResult mix = mixup_cutmix(batch_.videos, batch_.labels, K, mx, mix_key);
  VideoMAEClassifyOptions co;
  co.drop_path_rate = c_.drop_path;
  co.head_dropout = c_.head_dropout;
  co.seed = c_.seed;
  co.step = micro;
  co.first_clip = first_clip;
  co.loss_scale = mo.loss_scale * float(double(B) / double(global_batch));  // the ranks' gradients add up to the mean
  const VideoMAEClassifyStats st = classify(ctx, batch_.videos, mix.targets, co);
  const Tensor logits = st.logits.device() == Device::cpu ? st.logits : st.logits.to(Device::cpu);
  for (int64_t r = 0; r < B; ++r) {  // training accuracy on the (mixed) batch, against the clip's own label
    const float* z = logits.data<float>() + r * K;
    hits_ += std::max_element(z, z + K) - z == batch_.labels[size_t(r)];
  }
  loss_sum_ += st.loss * double(B);
  lam_sum_ += mix.lam;
  rows_ += B;
  ++micro_;
  return c_.micro_flops * double(B) / double(c_.batch);
}

StepSummary ClipClassifyTask::finish_step() {
  // Over the ranks: loss x rows, rows, hits, mixing weights and micro-batches.
  double t[5] = {loss_sum_, double(rows_), double(hits_), lam_sum_, double(micro_)};
  if (world_ > 1) Communicator::world().allreduce_sum(t, 5, "the step's loss and accuracy");
  StepSummary s;
  s.loss = t[1] > 0 ? t[0] / t[1] : 0;  // every micro-batch has the same rows: the mean of their means
  s.accuracy = t[1] > 0 ? t[2] / t[1] : 0;
  s.samples = int64_t(t[1]);
  s.tokens = s.samples * c_.tokens_per_clip;
  s.extras = {{"epoch", double(epoch_)}, {"mix_lam", t[4] > 0 ? t[3] / t[4] : 1.0}};
  return s;
}

void ClipClassifyTask::save_data_state(TrainerState& state) { state.data["clip_batches"] = batches_consumed_; }

std::string ClipClassifyTask::closing_note() { return video::loader_summary(loader_->times()); }

}  // namespace unmask::train
