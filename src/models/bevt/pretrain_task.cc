// models/bevt/pretrain_task.cc: see pretrain_task.h.
#include "models/bevt/pretrain_task.h"

#include <cstdio>

#include "models/bevt/checkpoint.h"
#include "models/bevt/flops.h"
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask::bevt {

BevtPretrainTask::BevtPretrainTask(Context& ctx, const BevtPretrainSettings& settings, const DalleEncoder& tokenizer,
                                   const train::LoopStart& start, int64_t accumulation)
    : s_(settings),
      model_(BevtPretrainModel::random(settings.config, settings.vocab, settings.seed)),
      tokenizer_(tokenizer.to(ctx.device())),
      accumulation_(accumulation) {
  Communicator& comm = Communicator::world();
  world_ = comm.size(), rank_ = comm.rank();
  UNMASK_CHECK(tokenizer_.config.vocab == s_.vocab, "BEVT: the tokenizer has ", tokenizer_.config.vocab,
               " codes and the head ", s_.vocab, Hint("give --vocab " + std::to_string(tokenizer_.config.vocab)));
  if (s_.clips % accumulation_ || s_.images % accumulation_)
    throw Error("BEVT: ", s_.clips, " clips and ", s_.images, " images a step do not split evenly over ", accumulation_,
                " micro-batches", Hint("make --clips and --images multiples of --accumulation"));
  clips_ = s_.clips / accumulation_, images_ = s_.images / accumulation_;
  source_ = std::make_unique<video::BevtSource>(s_.data, s_.video_list, s_.image_source, s_.root);
  if (clips_ + images_ == 0) throw Error("BEVT: no clips and no images a step");
  // Weights: the checkpoint resumed from, else --init-from, else BEVT's init from the seed.
  const std::string weights = !start.resume_dir.empty() ? train::checkpoint_model_dir(start.resume_dir) : s_.init_from;
  if (!weights.empty()) {
    BevtLoadOptions lo;
    lo.window = s_.config.window;
    if (start.resume_dir.empty())  // a backbone-only file keeps the necks' and head's init
      lo.allow_missing_prefixes = {"backbone.fpn", "backbone.lm_down", "cls_head.", "backbone.mask_token",
                                   "backbone.patch_embed_2d."};
    const BevtLoadReport r = load_bevt(weights, model_.params(), lo);
    if (comm.is_root() && start.resume_dir.empty()) std::fprintf(stderr, "%s\n", r.summary().c_str());
  }
  model_.to(ctx);  // no-op on the CPU; before the gradient sync and the optimizer take the params
}

std::string BevtPretrainTask::title() const {
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s: BEVT %s (C %lld), %lld clips x %lld x %lld^2 + %lld images a step (x %d ranks), %s",
                s_.output.c_str(), s_.size.c_str(), (long long)s_.config.embed_dim, (long long)s_.clips,
                (long long)s_.data.frames, (long long)s_.data.crop, (long long)s_.images, world_,
                s_.tokenizer_name.c_str());
  return buf;
}

void BevtPretrainTask::zero_grad(Context& ctx) {
  model_.zero_grad(ctx);
  video_loss_ = image_loss_ = 0;
  video_masked_ = video_correct_ = image_masked_ = image_correct_ = micro_batches_ = samples_ = majority_ = context_ = 0;
}

double BevtPretrainTask::micro_batch(Context& ctx, const train::MicroBatchOptions& mo) {
  const uint64_t slot = uint64_t((mo.step * mo.accumulation + mo.micro) * world_ + rank_);
  const uint64_t first_clip = slot * uint64_t(clips_), first_image = slot * uint64_t(images_);
  const BevtBatch batch = source_->batch(first_clip, clips_, first_image, images_);
  // The next micro-batch's samples are decoded while this one trains.
  const int64_t next = mo.micro + 1 < mo.accumulation ? mo.step * mo.accumulation + mo.micro + 1
                                                      : (mo.step + 1) * mo.accumulation;
  const uint64_t next_slot = uint64_t(next * world_ + rank_);
  source_->prefetch(next_slot * uint64_t(clips_), clips_, next_slot * uint64_t(images_), images_);
  BevtStepOptions o;
  o.loss_scale = mo.loss_scale / float(world_);
  o.drop_path_rate = s_.drop_path_rate;
  o.seed = s_.data.seed;
  o.first_clip = first_clip, o.first_image = first_image;
  const BevtStepStats st = bevt_pretrain_step(ctx, model_, &tokenizer_, batch, o);
  video_loss_ += st.video.loss, image_loss_ += st.image.loss;
  video_masked_ += st.video.masked, video_correct_ += st.video.correct;
  image_masked_ += st.image.masked, image_correct_ += st.image.correct;
  majority_ += st.video.majority + st.image.majority;
  context_ += st.video.context + st.image.context;
  ++micro_batches_;
  samples_ += clips_;
  const int64_t out_tokens_v = clips_ * s_.data.frames * (s_.data.crop / 16) * (s_.data.crop / 16);
  const int64_t out_tokens_i = images_ * (s_.data.crop / 16) * (s_.data.crop / 16);
  return bevt_step_flops_run(s_.config, s_.vocab, tokenizer_.config, clips_, s_.data.frames, images_, s_.data.crop,
                             out_tokens_v ? double(st.video.masked) / double(out_tokens_v) : 0.0,
                             out_tokens_i ? double(st.image.masked) / double(out_tokens_i) : 0.0, st.tokenized_frames);
}

train::StepSummary BevtPretrainTask::finish_step() {
  double t[10] = {video_loss_,           image_loss_,           double(video_masked_), double(video_correct_),
                  double(image_masked_), double(image_correct_), double(micro_batches_), double(samples_),
                  double(majority_),     double(context_)};
  if (world_ > 1) Communicator::world().allreduce_sum(t, 10, "the step's BEVT losses");
  const double n = std::max(1.0, t[6]);  // micro-batches over all ranks
  train::StepSummary s;
  s.loss = (t[0] + t[1]) / n;
  s.accuracy = t[2] + t[4] > 0 ? (t[3] + t[5]) / (t[2] + t[4]) : 0.0;
  s.samples = int64_t(t[7]);
  s.tokens = int64_t(t[2] + t[4]);
  s.extras = {{"video_loss", t[0] / n}, {"image_loss", t[1] / n},
              {"video_mask_acc", t[2] > 0 ? t[3] / t[2] : 0.0}, {"image_mask_acc", t[4] > 0 ? t[5] / t[4] : 0.0},
              {"majority_acc", t[2] + t[4] > 0 ? t[8] / (t[2] + t[4]) : 0.0},
              {"context_acc", t[2] + t[4] > 0 ? t[9] / (t[2] + t[4]) : 0.0}};
  return s;
}

void BevtPretrainTask::save_model(const std::string& dir) { save_bevt(dir, s_.config, s_.vocab, model_.params()); }

void BevtPretrainTask::save_data_state(train::TrainerState& state) {
  // Every draw is keyed by (seed, step, micro-batch, rank): the step is the whole data position.
  state.data["bevt_clips_per_step"] = s_.clips;
  state.data["bevt_images_per_step"] = s_.images;
}

double BevtPretrainTask::micro_batch_flops() const {
  return bevt_iteration_flops(s_.config, s_.vocab, tokenizer_.config, clips_, s_.data.frames, images_, s_.data.crop);
}

}  // namespace unmask::bevt
