// app/video_common.h: what the video training commands share (app/cmd_video_train.cc,
// app/cmd_video_eval.cc): opening a clip loader on a store or a list file, the model config
// from the command line, class counts, multi-view evaluation and the per-step JSONL log.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cli.h"
#include "unmask/videomae.h"
#include "data/video/clip_loader.h"

namespace unmask::cli {

/// Options every video command takes for its data (--data, --root, --format, --short-side,
/// --frames-per-clip via the model, --sampling-rate, --segments, --loader-threads, --strict,
/// --keep-truncated). A list is checked video by video with prepare-video's rule.
std::vector<OptionSpec> video_data_specs();
/// Options that pick the model size (--preset, --img, --frames, --decoder-depth).
std::vector<OptionSpec> video_model_specs();

/// --preset with --img / --frames / --decoder-depth overrides, validated.
VideoMAEConfig video_model_config(const Args& a);

/// A loader on --data: a clip store directory (prepare-video) or a list file decoded on the fly.
video::ClipLoader open_video_loader(const Args& a, const std::string& data, video::ClipLoaderOptions options);

/// The labels of every video of --data (store index or list file), in order.
std::vector<int64_t> video_labels(const Args& a, const std::string& data);

struct ViewEvalResult {
  int64_t videos = 0, views = 0;   // videos scored, views per video
  double top1 = 0, top5 = 0;       // fractions over videos: softmax per view, averaged, then ranked
  double seconds = 0, clips_per_s = 0;
  video::LoaderTimes loader;
  std::vector<int64_t> predicted, labels;  // per scored video, in data order
};

/// Scores every video of `data` with test_segments x test_crops views (VideoMAE: softmax per
/// view, then the mean over the video's views) and ranks the classes.
ViewEvalResult evaluate_video_views(Context& ctx, VideoMAEClassifier& model, const Args& a, const std::string& data,
                                    int segments, int crops, int batch);
/// Any clip classifier: its clip shape, classes and inference logits [B, K] of clips [B, 3, T, S, S].
struct ClipClassifier {
  int64_t num_frames = 0, crop = 0, num_classes = 0;
  std::function<Tensor(Context&, const Tensor&)> logits;
};
ViewEvalResult evaluate_video_views(Context& ctx, const ClipClassifier& model, const Args& a, const std::string& data,
                                    int segments, int crops, int batch);

/// --force: the option that lets a training command write over an earlier run in --output.
OptionSpec video_force_spec();
/// Refuses --output when it already holds a run (model/, metrics.jsonl, eval.json) unless --force:
/// the new run would replace the old one's model and truncate its metrics.
void check_video_output(const Args& a, const std::string& out, const char* command);

/// Appends one JSON object per line to `path` and flushes (the file is truncated when opened).
class JsonlLog {
 public:
  explicit JsonlLog(const std::string& path);
  ~JsonlLog();
  JsonlLog(const JsonlLog&) = delete;
  JsonlLog& operator=(const JsonlLog&) = delete;
  void write(const std::string& json_object);

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace unmask::cli
