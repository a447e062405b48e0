// app/video_common.cc: see video_common.h.
#include "video_common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

#include "io/file.h"
#include "unmask/error.h"
#include "data/video/clip_store.h"
#include "data/video/sampling.h"

namespace unmask::cli {

std::vector<OptionSpec> video_data_specs() {
  return {
      {"root", "DIR", "prefix for relative paths of a list file", ""},
      {"list-format", "KIND", "list format: videomae, vswift, vswift4, vswift6, videomae2, rawframes or auto", "auto"},
      {"fname-tmpl", "T", "list input: file names in frame folders (videomae2, rawframes)", "img_{:05}.jpg"},
      {"short-side", "N", "list input: resize the short side while decoding (a store is already resized)", "0"},
      {"sampling-rate", "N", "dense sampling: frame step (VideoMAE K400 4, SSv2 pretraining 2)", "4"},
      {"segments", "", "TSN segment sampling (SSv2) instead of dense", ""},
      {"loader-threads", "N", "clip loader worker threads", "2"},
      {"strict", "", "a bad video is an error (default: skipped, counted and reported)", ""},
      {"keep-truncated", "", "list input: use the complete frames of truncated files (as prepare-video's)", ""},
  };
}

std::vector<OptionSpec> video_model_specs() {
  return {
      {"preset", "NAME", "model size: tiny, small, base, large, huge, giant", "tiny"},
      {"img", "N", "crop size (default: the preset's)", "0"},
      {"frames", "N", "frames per clip (default: the preset's)", "0"},
      {"decoder-depth", "N", "pretraining decoder blocks (default: the preset's)", "-1"},
      {"patch", "N", "patch size in pixels (default: the preset's 16; 14 for giant)", "0"},
  };
}

VideoMAEConfig video_model_config(const Args& a) {
  VideoMAEConfig c = VideoMAEConfig::preset(a.get("preset"));
  if (a.get_int("img") > 0) c.img_size = a.get_int("img");
  if (a.get_int("frames") > 0) c.num_frames = a.get_int("frames");
  if (a.get_int("decoder-depth") >= 0) c.decoder_depth = a.get_int("decoder-depth");
  if (a.get_int("patch") > 0) c.patch = a.get_int("patch");
  c.validate();
  return c;
}

namespace {

video::ListFormat list_format(const Args& a) { return video::parse_list_format(a.get("list-format")); }

bool is_store(const std::string& data) {
  if (!std::filesystem::exists(data))
    throw Error("--data ", data, " does not exist",
                Hint("give a clip store made by `unmask prepare-video` or a list file (path label per line)"));
  return std::filesystem::is_directory(data);
}

}  // namespace

video::ClipLoader open_video_loader(const Args& a, const std::string& data, video::ClipLoaderOptions o) {
  o.sampling_rate = int(a.get_int("sampling-rate"));
  o.segments = a.has("segments");
  o.threads = int(a.get_int("loader-threads"));
  o.strict = a.has("strict");
  o.keep_truncated = a.has("keep-truncated");
  o.frame_template = a.get("fname-tmpl");
  if (o.sampling_rate < 1) throw Error("--sampling-rate must be >= 1, got ", o.sampling_rate);
  if (o.threads < 1) throw Error("--loader-threads must be >= 1, got ", o.threads);
  if (is_store(data)) return video::ClipLoader::from_store(data, o);
  return video::ClipLoader::from_list(data, a.get("root"), list_format(a), int(a.get_int("short-side")), o);
}

std::vector<int64_t> video_labels(const Args& a, const std::string& data) {
  std::vector<int64_t> labels;
  if (is_store(data)) {
    const video::ClipStore store = video::ClipStore::open(data);
    for (int64_t i = 0; i < store.size(); ++i) labels.push_back(store.entry(i).label);
  } else {
    for (const video::ListEntry& e : video::read_video_list(data, list_format(a), a.get("root")))
      labels.push_back(e.label);
  }
  if (labels.empty()) throw Error("--data ", data, " holds no videos");
  return labels;
}

ViewEvalResult evaluate_video_views(Context& ctx, VideoMAEClassifier& model, const Args& a, const std::string& data,
                                    int segments, int crops, int batch) {
  ClipClassifier m;
  m.num_frames = model.config().num_frames, m.crop = model.config().img_size, m.num_classes = model.num_classes();
  m.logits = [&](Context& c, const Tensor& videos) { return model.logits(c, videos); };
  return evaluate_video_views(ctx, m, a, data, segments, crops, batch);
}

ViewEvalResult evaluate_video_views(Context& ctx, const ClipClassifier& model, const Args& a, const std::string& data,
                                    int segments, int crops, int batch) {
  if (segments < 1 || crops < 1) throw Error("test views need >= 1 segment and crop, got ", segments, " x ", crops);
  video::ClipLoaderOptions o;
  o.mode = video::ClipLoaderOptions::Mode::test;
  o.batch = batch;
  o.num_frames = int(model.num_frames);
  o.crop = int(model.crop);
  o.test_segments = segments;
  o.test_crops = crops;
  o.shuffle = false;
  o.drop_last = false;
  video::ClipLoader loader = open_video_loader(a, data, o);
  const int64_t K = model.num_classes;
  // per video: the sum of the views' softmax, the view count and the label
  std::map<int64_t, std::pair<std::vector<double>, int64_t>> scores;
  std::map<int64_t, int64_t> label_of;
  const auto t0 = std::chrono::steady_clock::now();
  video::ClipBatch b;
  int64_t rows = 0;
  while (loader.next(b)) {
    const Tensor dev_logits = model.logits(ctx, b.videos);
    const Tensor logits = dev_logits.device() == Device::cpu ? dev_logits : dev_logits.to(Device::cpu);
    for (int64_t r = 0; r < logits.size(0); ++r) {
      const float* z = logits.data<float>() + r * K;
      const double zmax = *std::max_element(z, z + K);
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += std::exp(double(z[k]) - zmax);
      auto& [acc, views] = scores[b.video_index[size_t(r)]];
      acc.resize(size_t(K), 0.0);
      for (int64_t k = 0; k < K; ++k) acc[size_t(k)] += std::exp(double(z[k]) - zmax) / sum;
      ++views;
      label_of[b.video_index[size_t(r)]] = b.labels[size_t(r)];
      ++rows;
    }
  }
  ViewEvalResult res;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.views = int64_t(segments) * crops;
  int64_t hit1 = 0, hit5 = 0;
  for (auto& [video, sv] : scores) {
    auto& [acc, views] = sv;
    if (views != res.views)
      throw Error("evaluation: video ", video, " got ", views, " views, expected ", res.views);
    std::vector<int64_t> order(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) order[size_t(k)] = k;
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return acc[size_t(x)] > acc[size_t(y)]; });
    const int64_t label = label_of[video];
    hit1 += order[0] == label;
    for (int64_t k = 0; k < std::min<int64_t>(5, K); ++k) hit5 += order[size_t(k)] == label;
    res.predicted.push_back(order[0]);
    res.labels.push_back(label);
  }
  res.videos = int64_t(scores.size());
  if (res.videos == 0) throw Error("evaluation: no video of ", data, " could be read");
  res.top1 = double(hit1) / double(res.videos);
  res.top5 = double(hit5) / double(res.videos);
  res.clips_per_s = double(rows) / std::max(res.seconds, 1e-9);
  res.loader = loader.times();
  return res;
}

OptionSpec video_force_spec() {
  return {"force", "", "write into --output even when it holds an earlier run (its model/ and metrics.jsonl are replaced)", ""};
}

void check_video_output(const Args& a, const std::string& out, const char* command) {
  if (a.has("force")) return;
  std::string held;
  for (const std::string& name : io::directory_entries(out))
    if (name == "model" || name == "metrics.jsonl" || name == "eval.json") held += (held.empty() ? "" : ", ") + name;
  if (!held.empty())
    throw Error(command, ": --output ", out, " already holds a run (", held, "); it would be replaced",
                Hint("choose a new --output, or pass --force to replace it"));
}

JsonlLog::JsonlLog(const std::string& path) {
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) throw Error("cannot create ", path, Hint("check that the directory exists and is writable"));
}
JsonlLog::~JsonlLog() {
  if (file_) std::fclose(file_);
}
void JsonlLog::write(const std::string& json_object) {
  std::fputs(json_object.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

}  // namespace unmask::cli
