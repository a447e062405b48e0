// VideoMAE fine-tuning on the one training loop (see videomae_finetune_task.h).
#include "models/videomae/finetune_task.h"

#include <cstdio>

#include "unmask/dist.h"
#include "unmask/error.h"
#include "models/videomae/flops.h"

namespace unmask::video {

namespace {

train::ClipClassifySettings common(const VideoMAEFinetuneSettings& s) {
  train::ClipClassifySettings c;
  c.num_classes = s.num_classes, c.batch = s.batch, c.seed = s.seed;
  c.drop_path = s.drop_path, c.head_dropout = s.head_dropout;
  c.mixup = s.mixup, c.cutmix = s.cutmix, c.smoothing = s.smoothing;
  c.tokens_per_clip = s.config.num_patches();
  VideoMAEFlopConfig fc;
  const VideoMAEConfig& m = s.config;
  fc.img_size = m.img_size, fc.frames = m.num_frames, fc.tubelet = m.tubelet, fc.patch = m.patch;
  fc.enc_dim = m.dim, fc.enc_depth = m.depth, fc.enc_heads = m.heads, fc.enc_mlp_hidden = m.mlp_hidden(m.dim);
  fc.num_classes = s.num_classes;
  fc.batch = s.batch;
  c.micro_flops = videomae_finetune_step_flops(fc);
  return c;
}

}  // namespace

VideoMAEFinetuneTask::VideoMAEFinetuneTask(const VideoMAEFinetuneSettings& settings, Context& /*ctx: the CPU*/,
                                           const ClipLoaderOptions& loader_options,
                                           const std::function<ClipLoader(const ClipLoaderOptions&)>& open_loader,
                                           const train::LoopStart& start)
    : ClipClassifyTask(common(settings)), s_(settings) {
  const VideoMAEConfig& c = s_.config;
  model_.emplace(VideoMAEClassifier::random(c, s_.num_classes, s_.seed));
  if (!start.resume_dir.empty()) {
    load_videomae(train::checkpoint_model_dir(start.resume_dir), c, model_->params());  // every tensor, head included
  } else if (!s_.init_from.empty()) {
    VideoMAELoadOptions lo;
    lo.allow_missing_prefixes = {"head.", "fc_norm."};
    const LoadReport r = load_videomae(s_.init_from, c, model_->params(), lo);
    if (Communicator::world().is_root()) std::fprintf(stderr, "%s\n", r.summary().c_str());
  }
  model_->set_layer_decay(s_.layer_decay);
  open_data(loader_options, open_loader, start, "finetune-video");
}

std::string VideoMAEFinetuneTask::title() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: VideoMAE %s fine-tuning, %lld classes, batch %lld, layer decay %.2f, mixup %.1f / cutmix %.1f",
                s_.output.c_str(), s_.preset.c_str(), (long long)s_.num_classes, (long long)(s_.batch * world_),
                double(s_.layer_decay), double(s_.mixup), double(s_.cutmix));
  return buf;
}

void VideoMAEFinetuneTask::save_model(const std::string& dir) {
  save_videomae(dir, s_.config, model_->params(), s_.naming, s_.num_classes, s_.class_names);
}

}  // namespace unmask::video
