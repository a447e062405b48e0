// models/bevt/finetune_task.cc: see finetune_task.h.
#include "models/bevt/finetune_task.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/rng.h"
#include "io/file.h"
#include "models/bevt/checkpoint.h"
#include "models/bevt/flops.h"
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask::bevt {

void save_swin_classifier(const std::string& dir, const SwinConfig& c, int64_t num_classes,
                          const std::vector<Param>& params, const std::vector<std::string>& class_names) {
  save_bevt(dir, c, 0, params);  // weights and the Swin sizes; the config gains the head below
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  nlohmann::json j = nlohmann::json::parse(io::read_file(file));
  j.erase("vocab_size");
  j["num_classes"] = num_classes;
  nlohmann::json id2label = nlohmann::json::object();
  for (int64_t k = 0; k < num_classes; ++k)
    id2label[std::to_string(k)] = size_t(k) < class_names.size() ? class_names[size_t(k)] : "LABEL_" + std::to_string(k);
  j["id2label"] = id2label;
  io::write_file_atomic(file, j.dump(2) + "\n");
}

SwinFinetuneTask::SwinFinetuneTask(const SwinFinetuneSettings& settings, const video::ClipLoaderOptions& loader_options,
                                   const std::function<video::ClipLoader(const video::ClipLoaderOptions&)>& open_loader,
                                   const train::LoopStart& start)
    : s_(settings) {
  Communicator& comm = Communicator::world();
  world_ = comm.size(), rank_ = comm.rank();
  model_.emplace(SwinClassifier::random(s_.config, s_.num_classes, s_.seed));
  if (!start.resume_dir.empty()) {
    load_bevt(train::checkpoint_model_dir(start.resume_dir), model_->params());  // every tensor, head included
    auto it = start.resumed.data.find("clip_batches");
    if (it == start.resumed.data.end())
      throw Error("the checkpoint ", start.resume_dir, " records no clip-loader position (data.clip_batches)",
                  Hint("it was not written by finetune-swin; resume a finetune-swin run"));
    batches_consumed_ = it->second;
  } else if (!s_.init_from.empty()) {
    BevtLoadOptions lo;
    lo.allow_missing_prefixes = {"cls_head.fc_cls."};
    const BevtLoadReport r = load_bevt(s_.init_from, model_->params(), lo);
    if (comm.is_root()) std::fprintf(stderr, "%s\n", r.summary().c_str());
  }
  model_->set_layer_decay(s_.layer_decay);
  video::ClipLoaderOptions lo = loader_options;
  lo.start_batch = batches_consumed_;
  loader_.emplace(open_loader(lo));
  if (loader_->batches_per_epoch() < 1)
    throw Error("--data has ", loader_->size(), " videos, fewer than one --batch of ", s_.batch);
  // 3 x the backbone's forward a clip (the head is negligible).
  micro_flops_ = 3.0 * double(s_.batch) *
                 bevt_stream_flops(s_.config, 1, DalleEncoderConfig{}, false, s_.frames, s_.crop).backbone;
}

std::string SwinFinetuneTask::title() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: Video Swin %s fine-tuning, %lld classes, batch %lld, layer decay %.2f, mixup %.1f / cutmix %.1f",
                s_.output.c_str(), s_.size.c_str(), (long long)s_.num_classes, (long long)(s_.batch * world_),
                double(s_.layer_decay), double(s_.mixup), double(s_.cutmix));
  return buf;
}

void SwinFinetuneTask::zero_grad(Context&) {
  model_->zero_grad();
  loss_sum_ = lam_sum_ = 0;
  rows_ = hits_ = micro_ = 0;
}

double SwinFinetuneTask::micro_batch(Context& ctx, const train::MicroBatchOptions& mo) {
  if (!loader_->next(batch_) && !loader_->next(batch_))
    throw Error("the clip loader produced no batch in a whole epoch",
                Hint("the data has fewer videos than --batch (drop_last), or every video was skipped"));
  ++batches_consumed_;
  epoch_ = batch_.epoch;
  const int64_t B = batch_.videos.size(0), K = s_.num_classes;
  const int64_t global_batch = s_.batch * world_, first_clip = rank_ * s_.batch;
  const uint64_t micro = uint64_t(mo.step * mo.accumulation + mo.micro);
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
  co.loss_scale = mo.loss_scale * float(double(B) / double(global_batch));
  const VideoMAEClassifyStats st = model_->step(ctx, batch_.videos, mix.targets, co);
  for (int64_t r = 0; r < B; ++r) {  // training accuracy on the (mixed) batch, against the clip's own label
    const float* z = st.logits.data<float>() + r * K;
    hits_ += std::max_element(z, z + K) - z == batch_.labels[size_t(r)];
  }
  loss_sum_ += st.loss * double(B);
  lam_sum_ += mix.lam;
  rows_ += B;
  ++micro_;
  return micro_flops_ * double(B) / double(s_.batch);
}

train::StepSummary SwinFinetuneTask::finish_step() {
  double t[5] = {loss_sum_, double(rows_), double(hits_), lam_sum_, double(micro_)};
  if (world_ > 1) Communicator::world().allreduce_sum(t, 5, "the step's loss and accuracy");
  train::StepSummary s;
  s.loss = t[1] > 0 ? t[0] / t[1] : 0;
  s.accuracy = t[1] > 0 ? t[2] / t[1] : 0;
  s.samples = int64_t(t[1]);
  s.extras = {{"epoch", double(epoch_)}, {"mix_lam", t[4] > 0 ? t[3] / t[4] : 1.0}};
  return s;
}

void SwinFinetuneTask::save_model(const std::string& dir) {
  save_swin_classifier(dir, s_.config, s_.num_classes, model_->params());
}

void SwinFinetuneTask::save_data_state(train::TrainerState& state) { state.data["clip_batches"] = batches_consumed_; }

std::string SwinFinetuneTask::closing_note() { return video::loader_summary(loader_->times()); }

}  // namespace unmask::bevt
