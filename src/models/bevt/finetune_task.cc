// models/bevt/finetune_task.cc: see finetune_task.h.
#include "models/bevt/finetune_task.h"

#include <algorithm>
#include <cstdio>

#include "models/bevt/checkpoint.h"
#include "models/bevt/flops.h"
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask::bevt {

namespace {

train::ClipClassifySettings common(const SwinFinetuneSettings& s) {
  train::ClipClassifySettings c;
  c.num_classes = s.num_classes, c.batch = s.batch, c.seed = s.seed;
  c.drop_path = s.drop_path, c.head_dropout = s.head_dropout;
  c.mixup = s.mixup, c.cutmix = s.cutmix, c.smoothing = s.smoothing;
  // 3 x the backbone's forward a clip (the head is negligible)
  c.micro_flops = 3.0 * double(s.batch) * bevt_stream_flops(s.config, 1, DalleEncoderConfig{}, false, s.frames, s.crop).backbone;
  return c;
}

}  // namespace

SwinFinetuneTask::SwinFinetuneTask(Context& ctx, const SwinFinetuneSettings& settings,
                                   const video::ClipLoaderOptions& loader_options,
                                   const std::function<video::ClipLoader(const video::ClipLoaderOptions&)>& open_loader,
                                   const train::LoopStart& start)
    : ClipClassifyTask(common(settings)), s_(settings) {
  model_.emplace(SwinClassifier::random(s_.config, s_.num_classes, s_.seed));
  if (!start.resume_dir.empty()) {
    load_bevt(train::checkpoint_model_dir(start.resume_dir), model_->params());  // every tensor, head included
  } else if (!s_.init_from.empty()) {
    BevtLoadOptions lo;
    lo.allow_missing_prefixes = {"cls_head.fc_cls."};
    lo.window = s_.config.window;
    const BevtLoadReport r = load_bevt(s_.init_from, model_->params(), lo);
    if (Communicator::world().is_root()) std::fprintf(stderr, "%s\n", r.summary().c_str());
  }
  model_->set_layer_decay(s_.layer_decay);
  model_->to(ctx);  // no-op on the CPU; before the gradient sync and the optimizer take the params
  open_data(loader_options, open_loader, start, "finetune-swin");
}

std::string SwinFinetuneTask::title() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: Video Swin %s fine-tuning, %lld classes, batch %lld, layer decay %.2f, mixup %.1f / cutmix %.1f",
                s_.output.c_str(), s_.size.c_str(), (long long)s_.num_classes, (long long)(s_.batch * world_),
                double(s_.layer_decay), double(s_.mixup), double(s_.cutmix));
  return buf;
}

void SwinFinetuneTask::save_model(const std::string& dir) {
  save_swin_classifier(dir, s_.config, s_.num_classes, model_->params());
}

}  // namespace unmask::bevt
