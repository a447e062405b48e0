// data/video/bevt_data.cc: see bevt_data.h.
#include "data/video/bevt_data.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <future>
#include <mutex>
#include <thread>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "data/rng.h"
#include "data/video/decode.h"
#include "data/video/listed_video.h"
#include "data/video/synthetic.h"
#include "data/video/video_list.h"
#include "unmask/error.h"

namespace unmask::video {

namespace {

constexpr double kMean[3] = {123.675, 116.28, 103.53}, kStd[3] = {58.395, 57.12, 57.375};
constexpr uint64_t kStreamBevtClip = 0xB1, kStreamBevtImage = 0xB2, kStreamBevtImageMask = 0xB3, kStreamBevtOrder = 0xB4;

// OpenCV's Lanczos-4 weights for the fractional offset fx in [0, 1) (taps -3 .. +4), computed as
// its interpolateLanczos4 does (double sines, float weights normalised in float), then as the
// 8-bit path uses them: fixed point, x 2048 rounded to nearest.
void lanczos4_fixed_weights(float fx, int w[8]) {
  constexpr double kPi = 3.14159265358979323846, s45 = 0.70710678118654752440;
  static const double cs[8][2] = {{1, 0}, {-s45, -s45}, {0, 1}, {s45, -s45}, {-1, 0}, {s45, s45}, {0, -1}, {-s45, s45}};
  float c[8];
  if (fx < 1.1920929e-7f) {
    for (int i = 0; i < 8; ++i) c[i] = i == 3 ? 1.0f : 0.0f;
  } else {
    const double y0 = -(fx + 3) * kPi * 0.25, s0 = std::sin(y0), c0 = std::cos(y0);
    float sum = 0;
    for (int i = 0; i < 8; ++i) {
      const double y = -(fx + 3 - i) * kPi * 0.25;
      c[i] = float((cs[i][0] * s0 + cs[i][1] * c0) / (y * y));
      sum += c[i];
    }
    sum = 1.0f / sum;
    for (float& v : c) v *= sum;
  }
  for (int i = 0; i < 8; ++i) w[i] = int(std::nearbyint(c[i] * 2048.0f));
}

// The source position of output pixel d (OpenCV: float (d + 0.5) scale - 0.5), split into the
// integer tap origin and the fraction.
void lanczos4_source(int d, double scale, int& origin, float& frac) {
  const float f = float((d + 0.5) * scale - 0.5);
  origin = int(std::floor(f));
  frac = f - float(origin);
}

struct Sample {
  std::vector<float> pixels;  // [3, T, crop, crop] normalised
  std::vector<float> small;   // [T, 3, crop/2, crop/2] mapped for the tokenizer
};

// The pipeline after decoding: crop, flip, normalise, the tokenizer copy. rgb [T, H, W, 3].
Sample crop_and_copy(const std::vector<uint8_t>& rgb, int T, int H, int W, int crop, data::Rng& rng, bool flip_ok) {
  const int x0 = int(rng.below(uint64_t(W - crop + 1))), y0 = int(rng.below(uint64_t(H - crop + 1)));
  const bool flip = flip_ok && rng.uniform() < 0.5;
  const int half = crop / 2;
  Sample s;
  s.pixels.resize(size_t(3) * T * crop * crop);
  s.small.resize(size_t(T) * 3 * half * half);
  std::vector<uint8_t> cropped(size_t(crop) * crop * 3);
  for (int t = 0; t < T; ++t) {
    const uint8_t* f = rgb.data() + size_t(t) * H * W * 3;
    for (int y = 0; y < crop; ++y)
      for (int x = 0; x < crop; ++x) {
        const int sx = x0 + (flip ? crop - 1 - x : x);
        const uint8_t* p = f + (size_t(y0 + y) * W + sx) * 3;
        for (int c = 0; c < 3; ++c) {
          cropped[(size_t(y) * crop + x) * 3 + c] = p[c];
          s.pixels[((size_t(c) * T + t) * crop + y) * crop + x] = float((p[c] - kMean[c]) / kStd[c]);
        }
      }
    const std::vector<float> small = lanczos4_resize(cropped.data(), crop, crop, half, half);
    for (size_t i = 0; i < small.size(); ++i)
      s.small[size_t(t) * small.size() + i] = float(small[i] / 255.0 * 0.8 + 0.1);
  }
  return s;
}

int rescaled_short_side(const BevtDataOptions& o, data::Rng& rng) {
  const int lo = int(o.rescale_min * o.crop / 224), hi = int(o.rescale_max * o.crop / 224);
  return std::max(int(o.crop), lo + int(rng.below(uint64_t(std::max(0, hi - lo) + 1))));
}

void check(const BevtDataOptions& o) {
  UNMASK_CHECK(o.crop >= 32 && o.crop % 32 == 0, "BEVT data: the crop must be a multiple of 32, got ", o.crop);
  UNMASK_CHECK(o.frames >= 2 && o.frames % 2 == 0, "BEVT data: the clip length must be even, got ", o.frames);
  UNMASK_CHECK(o.rescale_min >= 224 && o.rescale_max >= o.rescale_min, "BEVT data: the rescale range ",
               o.rescale_min, "..", o.rescale_max, " must be at least the crop (224) and ordered");
  UNMASK_CHECK(o.workers >= 1 && o.workers <= 256, "BEVT data: workers must be in [1, 256], got ", o.workers);
}

// The jitter's three operations in one fixed random order per pipeline (mmaction's fn_idx).
void jitter_order(const BevtDataOptions& o, int order[3]) {
  order[0] = 0, order[1] = 1, order[2] = 2;
  data::Rng rng(data::derive_key(o.seed, {kStreamBevtImage}));
  rng.shuffle(order, 3);
}

// Sample i's pixels and tokenizer copy, from the sample's own random stream (seed, stream, index)
// and its rescaled short side (drawn first from that stream).
using MakeSample = std::function<Sample(uint64_t index, data::Rng& rng, int short_side)>;

// A stream's tensors ([n, 3, T, S, S] clips or [n, 3, S, S] images, and [n T, 3, S/2, S/2]
// tokenizer copies), sample i made by make(first + i, ...).
// The n samples from index `first`, decoded by o.workers threads (sample i by whichever takes it
// next: each is a function of its index alone, so the batch is the same for any thread count).
void fill_stream(const BevtDataOptions& o, bool image, uint64_t first, int64_t n, Tensor& pixels, Tensor& small,
                 const MakeSample& make) {
  const int64_t T = image ? 1 : o.frames, S = o.crop, half = S / 2;
  pixels = image ? Tensor::empty({n, 3, S, S}, DType::f32) : Tensor::empty({n, 3, T, S, S}, DType::f32);
  small = Tensor::empty({n * T, 3, half, half}, DType::f32);
  std::atomic<int64_t> next{0};
  std::exception_ptr failed;
  std::mutex failed_mutex;
  auto work = [&] {
    for (int64_t i; (i = next++) < n;) {
      try {
        const uint64_t index = first + uint64_t(i);
        data::Rng rng(data::derive_key(o.seed, {image ? kStreamBevtImage : kStreamBevtClip, index}));
        const int short_side = rescaled_short_side(o, rng);
        const Sample s = make(index, rng, short_side);
        std::copy(s.pixels.begin(), s.pixels.end(), pixels.data<float>() + i * int64_t(s.pixels.size()));
        std::copy(s.small.begin(), s.small.end(), small.data<float>() + i * int64_t(s.small.size()));
      } catch (...) {  // the first failure is rethrown; the other threads stop taking samples
        std::lock_guard<std::mutex> lock(failed_mutex);
        if (!failed) failed = std::current_exception();
        next = n;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int64_t w = 1; w < std::min<int64_t>(o.workers, n); ++w) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (failed) std::rethrow_exception(failed);
}

// The synthetic source's streams (no masks): clip i shows class i mod 4; an image is one frame of
// a synthetic video of its own (numbers far from the clips'), colour-jittered.
void synthetic_streams(const BevtDataOptions& o, uint64_t first_clip, int64_t clips, uint64_t first_image,
                       int64_t images, BevtBatch& b) {
  const int T = int(o.frames), S = int(o.crop);
  if (clips > 0)
    fill_stream(o, false, first_clip, clips, b.videos, b.video_frames, [&](uint64_t index, data::Rng& rng, int side) {
      const int H = side, W = (side * 4 / 3) & ~1;
      const std::vector<uint8_t> rgb =
          render_synthetic_video(o.seed, int64_t(index), int(index % kSyntheticClasses), T, W, H);
      return crop_and_copy(rgb, T, H, W, S, rng, o.flip);
    });
  if (images > 0) {
    int order[3];
    jitter_order(o, order);
    fill_stream(o, true, first_image, images, b.images, b.image_frames, [&](uint64_t index, data::Rng& rng, int side) {
      const int H = side, W = (side * 4 / 3) & ~1;
      std::vector<uint8_t> rgb =
          render_synthetic_video(o.seed ^ 0x5bd1e995u, int64_t(index), int(index % kSyntheticClasses), 1, W, H);
      if (o.jitter > 0) {
        double f[3];
        for (double& x : f) x = 1 - o.jitter + 2 * o.jitter * rng.uniform();
        color_jitter(rgb.data(), int64_t(H) * W, f, order);
      }
      return crop_and_copy(rgb, 1, H, W, S, rng, o.flip);
    });
  }
}

}  // namespace

BlockMaskOptions BevtDataOptions::masks() const {
  BlockMaskOptions m;
  m.height = m.width = crop / 16;
  m.count = m.height * m.width / 2;
  m.min_cells = std::max<int64_t>(1, (16 * m.height * m.width + 98) / 196);  // 16 of 196 at 224
  return m;
}

std::vector<float> lanczos4_resize(const uint8_t* rgb, int h, int w, int oh, int ow) {
  // Separable, in OpenCV's 8-bit fixed point: rows first (integer sums of weights x 2048), then
  // columns (x 2048 again), rounded by (sum + 2^21) >> 22 and saturated to 0..255.
  std::vector<int32_t> tmp(size_t(h) * ow * 3);
  int wt[8], origin;
  float frac;
  for (int x = 0; x < ow; ++x) {
    lanczos4_source(x, double(w) / ow, origin, frac);
    lanczos4_fixed_weights(frac, wt);
    for (int y = 0; y < h; ++y)
      for (int c = 0; c < 3; ++c) {
        int32_t acc = 0;
        for (int k = 0; k < 8; ++k) acc += wt[k] * rgb[(size_t(y) * w + std::clamp(origin - 3 + k, 0, w - 1)) * 3 + c];
        tmp[(size_t(y) * ow + x) * 3 + c] = acc;
      }
  }
  std::vector<float> out(size_t(3) * oh * ow);
  for (int y = 0; y < oh; ++y) {
    lanczos4_source(y, double(h) / oh, origin, frac);
    lanczos4_fixed_weights(frac, wt);
    for (int x = 0; x < ow; ++x)
      for (int c = 0; c < 3; ++c) {
        int64_t acc = 0;
        for (int k = 0; k < 8; ++k) acc += int64_t(wt[k]) * tmp[(size_t(std::clamp(origin - 3 + k, 0, h - 1)) * ow + x) * 3 + c];
        out[(size_t(c) * oh + y) * ow + x] = float(std::clamp<int64_t>((acc + (int64_t(1) << 21)) >> 22, 0, 255));
      }
  }
  return out;
}

void color_jitter(uint8_t* rgb, int64_t pixels, const double factors[3], const int order[3]) {
  std::vector<double> v(size_t(pixels) * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = rgb[i];
  auto gray = [&](int64_t p) { return 0.299 * v[size_t(p) * 3] + 0.587 * v[size_t(p) * 3 + 1] + 0.114 * v[size_t(p) * 3 + 2]; };
  for (int k = 0; k < 3; ++k) {
    const double f = factors[order[k]];
    if (order[k] == 0) {  // brightness: scale
      for (double& x : v) x *= f;
    } else if (order[k] == 1) {  // contrast: towards the mean grey level
      double mean = 0;
      for (int64_t p = 0; p < pixels; ++p) mean += gray(p);
      mean /= double(std::max<int64_t>(1, pixels));
      for (double& x : v) x = x * f + (1 - f) * mean;
    } else {  // saturation: towards each pixel's grey
      for (int64_t p = 0; p < pixels; ++p) {
        const double g = gray(p);
        for (int c = 0; c < 3; ++c) v[size_t(p) * 3 + c] = v[size_t(p) * 3 + c] * f + (1 - f) * g;
      }
    }
  }
  for (size_t i = 0; i < v.size(); ++i) rgb[i] = uint8_t(std::clamp(v[i], 0.0, 255.0));
}

void draw_bevt_masks(const BevtDataOptions& o, uint64_t first_clip, int64_t clips, uint64_t first_image,
                     int64_t images, BevtBatch& b) {
  check(o);
  const BlockMaskOptions m = o.masks();
  b.video_masks.clear(), b.image_masks.clear();
  for (int64_t i = 0; i < clips; ++i) {
    const std::vector<uint8_t> v = bevt_tube_mask(m, o.frames / 2, o.seed, first_clip + uint64_t(i));
    b.video_masks.insert(b.video_masks.end(), v.begin(), v.end());
  }
  const uint64_t image_seed = data::derive_key(o.seed, {kStreamBevtImageMask});
  for (int64_t i = 0; i < images; ++i) {
    const std::vector<uint8_t> v = block_mask(m, image_seed, first_image + uint64_t(i));
    b.image_masks.insert(b.image_masks.end(), v.begin(), v.end());
  }
}

BevtBatch synthetic_bevt_batch(const BevtDataOptions& o, uint64_t first_clip, int64_t clips, uint64_t first_image,
                               int64_t images) {
  check(o);
  BevtBatch b;
  synthetic_streams(o, first_clip, clips, first_image, images, b);
  draw_bevt_masks(o, first_clip, clips, first_image, images, b);
  return b;
}

std::vector<ImageEntry> read_image_source(const std::string& path, const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<ImageEntry> out;
  if (fs::is_directory(path)) {
    std::vector<std::string> classes;
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_directory()) classes.push_back(e.path().filename().string());
    std::sort(classes.begin(), classes.end());
    for (size_t k = 0; k < classes.size(); ++k) {
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(fs::path(path) / classes[k])) {
        std::string ext = e.path().extension().string();
        std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
        if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) files.push_back(e.path().string());
      }
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) out.push_back({f, int64_t(k)});
    }
    if (out.empty())
      throw Error("images: ", path, " holds no class folders of .jpg / .JPEG files",
                  Hint("an ImageNet-style folder: DIR/<class>/<image>.JPEG, or a list file of 'path label' lines"));
    return out;
  }
  std::ifstream f(path);
  if (!f) throw Error("images: cannot read ", path, Hint("give an image list file or an ImageNet-style folder"));
  const fs::path base = root.empty() ? fs::path(path).parent_path() : fs::path(root);
  std::string line;
  for (int64_t number = 1; std::getline(f, line); ++number) {
    std::istringstream in(line);
    std::string p, extra;
    int64_t label = -1;
    if (!(in >> p)) continue;  // blank
    if (!(in >> label) || label < 0 || (in >> extra))
      throw Error("images: ", path, ":", number, ": expected 'path label' (a label >= 0), got '", line, "'");
    out.push_back({fs::path(p).is_absolute() ? p : (base / p).string(), label});
  }
  if (out.empty()) throw Error("images: ", path, " lists no images");
  return out;
}

struct BevtSource::Impl {
  BevtDataOptions o;
  std::vector<ListEntry> videos;
  std::vector<ImageEntry> images;
  std::atomic<int64_t> skipped{0};
  std::mutex orders_mutex;  // the decoding threads share the orders
  std::map<std::pair<uint64_t, uint64_t>, std::vector<int64_t>> orders;  // (stream, epoch) -> permutation
  // The batch being made in the background (prefetch) and its arguments.
  std::future<BevtBatch> pending;
  std::array<uint64_t, 4> pending_key{};
  BevtLoaderStats stats;
  std::mutex stats_mutex;

  BevtBatch make(uint64_t first_clip, int64_t clips, uint64_t first_image, int64_t images);

  // Entry of sample `index` of a stream of n entries; `attempt` > 0 moves along the order.
  int64_t entry(uint64_t stream, uint64_t index, int64_t n, int64_t attempt) {
    std::lock_guard<std::mutex> lock(orders_mutex);
    const uint64_t epoch = index / uint64_t(n);
    auto key = std::make_pair(stream, epoch);
    auto it = orders.find(key);
    if (it == orders.end()) {
      if (orders.size() > 4) orders.clear();  // batches read one or two epochs at a time
      std::vector<int64_t> perm(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) perm[size_t(k)] = k;
      data::Rng rng(data::derive_key(o.seed, {kStreamBevtOrder, stream, epoch}));
      rng.shuffle(perm.data(), n);
      it = orders.emplace(key, std::move(perm)).first;
    }
    return it->second[size_t((int64_t(index % uint64_t(n)) + attempt) % n)];
  }
};

BevtSource::BevtSource(const BevtDataOptions& options, const std::string& video_list, const std::string& images,
                       const std::string& root)
    : impl_(std::make_unique<Impl>()) {
  check(options);
  impl_->o = options;
  if (!video_list.empty())  // relative paths: from --root, else from the list's folder
    impl_->videos = read_video_list(video_list, ListFormat::automatic,
                                    root.empty() ? std::filesystem::path(video_list).parent_path().string() : root);
  if (!images.empty()) impl_->images = read_image_source(images, root);
  if (!video_list.empty() && impl_->videos.empty()) throw Error("videos: ", video_list, " lists no videos");
}

BevtSource::~BevtSource() {
  if (impl_->pending.valid()) impl_->pending.wait();  // a prefetch still running reads impl_
}
int64_t BevtSource::videos() const { return int64_t(impl_->videos.size()); }
int64_t BevtSource::image_files() const { return int64_t(impl_->images.size()); }
int64_t BevtSource::skipped() const { return impl_->skipped; }

std::string BevtSource::describe() const {
  auto part = [](int64_t n, const char* what) {
    return n ? std::to_string(n) + " " + what : std::string("synthetic ") + what;
  };
  return part(videos(), "videos") + " + " + part(image_files(), "images");
}

void BevtSource::prefetch(uint64_t first_clip, int64_t clips, uint64_t first_image, int64_t images) {
  Impl& m = *impl_;
  if (m.pending.valid()) m.pending.wait();  // one batch ahead at most
  m.pending_key = {first_clip, uint64_t(clips), first_image, uint64_t(images)};
  m.pending = std::async(std::launch::async, [&m, first_clip, clips, first_image, images] {
    return m.make(first_clip, clips, first_image, images);
  });
}

BevtBatch BevtSource::batch(uint64_t first_clip, int64_t clips, uint64_t first_image, int64_t images) {
  Impl& m = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  BevtBatch b;
  const bool hit = m.pending.valid() && m.pending_key == std::array<uint64_t, 4>{first_clip, uint64_t(clips),
                                                                                  first_image, uint64_t(images)};
  if (hit) {
    b = m.pending.get();  // rethrows what the background thread threw
  } else {
    if (m.pending.valid()) m.pending.wait();  // a prefetch of other samples: finish it, drop it
    m.pending = {};
    b = m.make(first_clip, clips, first_image, images);
  }
  std::lock_guard<std::mutex> lock(m.stats_mutex);
  m.stats.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.stats.prefetched += hit;
  return b;
}

BevtLoaderStats BevtSource::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->stats;
}

BevtBatch BevtSource::Impl::make(uint64_t first_clip, int64_t clips, uint64_t first_image, int64_t images) {
  Impl& m = *this;
  const auto t0 = std::chrono::steady_clock::now();
  const BevtDataOptions& o = m.o;
  const int T = int(o.frames), S = int(o.crop);
  BevtBatch b;
  synthetic_streams(o, first_clip, m.videos.empty() ? clips : 0, first_image, m.images.empty() ? images : 0, b);
  // A file that fails to decode hands its place to the next entry of the order, kAttempts in a row at most.
  constexpr int kAttempts = 8;
  auto first_decodable = [&](const char* what, const std::function<Sample(int attempt, std::string& path)>& take) {
    for (int attempt = 0;; ++attempt) {
      std::string path;
      try {
        return take(attempt, path);
      } catch (const Error& err) {
        ++m.skipped;
        if (attempt + 1 >= kAttempts)
          throw Error("BEVT data: ", kAttempts, " ", what, " in a row failed to decode; the last, ", path, ": ", err.what());
      }
    }
  };
  if (!m.videos.empty() && clips > 0)
    fill_stream(o, false, first_clip, clips, b.videos, b.video_frames, [&](uint64_t index, data::Rng& rng, int side) {
      return first_decodable("videos", [&](int attempt, std::string& path) {
        const ListEntry& e = m.videos[size_t(m.entry(0, index, int64_t(m.videos.size()), attempt))];
        path = e.path;
        ListedVideo v(e);
        const int64_t n = v.frames(), span = o.frames * o.frame_interval;
        const int64_t offset = n - span + 1 > 0 ? int64_t(rng.below(uint64_t(n - span + 1))) : 0;
        std::vector<int64_t> idx;
        for (int64_t k = 0; k < o.frames; ++k) idx.push_back((offset + k * o.frame_interval) % n);
        DecodeOptions d;
        d.short_side = side;
        const Clip c = v.decode(idx, d);
        return crop_and_copy(c.rgb, T, c.height, c.width, S, rng, o.flip);
      });
    });
  if (!m.images.empty() && images > 0) {
    int order[3];
    jitter_order(o, order);
    fill_stream(o, true, first_image, images, b.images, b.image_frames, [&](uint64_t index, data::Rng& rng, int side) {
      double f[3];
      for (double& x : f) x = 1 - o.jitter + 2 * o.jitter * rng.uniform();
      return first_decodable("images", [&](int attempt, std::string& path) {
        const ImageEntry& e = m.images[size_t(m.entry(1, index, int64_t(m.images.size()), attempt))];
        path = e.path;
        DecodeOptions d;
        d.short_side = side;
        Clip c = decode_image(e.path, d);
        if (o.jitter > 0) color_jitter(c.rgb.data(), int64_t(c.height) * c.width, f, order);
        return crop_and_copy(c.rgb, 1, c.height, c.width, S, rng, o.flip);
      });
    });
  }
  draw_bevt_masks(o, first_clip, clips, first_image, images, b);
  std::lock_guard<std::mutex> lock(m.stats_mutex);
  m.stats.batches += 1, m.stats.clips += clips, m.stats.images += images;
  m.stats.make_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

}  // namespace unmask::video
