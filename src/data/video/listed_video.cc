// data/video/listed_video.cc: a list entry's clip, opened for decoding (see listed_video.h).
#include "data/video/listed_video.h"

#include <algorithm>
#include <string>

#include "unmask/error.h"
#include "data/video/clip_store.h"

namespace unmask::video {

ListedVideo::ListedVideo(const ListEntry& entry, const std::string& frame_template) : path_(entry.path) {
  int64_t n = 0;
  if (entry.frame_folder) {
    folder_ = std::make_unique<FrameFolderReader>(entry.path, frame_template, entry.first_number,
                                                  std::max<int64_t>(entry.total_frames, 0));
    folder_info_ = folder_->info();
    n = folder_info_.num_frames;
    if (entry.total_frames > 0) {  // the list's count is the clip's length, as VideoMAE v2 reads it
      if (n < entry.total_frames)
        throw Error("video: ", entry.path, ": too short: the list says ", entry.total_frames, " frames, the folder has ",
                    n, " (", folder_->frame_path(0), " onwards)",
                    Hint("fix total_frames in the list, or check --fname-tmpl and the first frame number"));
      n = entry.total_frames;
      folder_info_.num_frames = folder_info_.num_keyframes = n;
    }
  } else {
    video_ = std::make_unique<VideoReader>(entry.path);
    n = video_->info().num_frames;
  }
  const int64_t end = entry.end_frame == -1 ? n : entry.end_frame;
  if (entry.start_frame < 0 || entry.start_frame >= end || end > n) {
    // A file with fewer complete frames than its header lists (MP4), or whose frames end before
    // its container's duration (any container: check_video_integrity's rule), is "truncated"
    // (decode.cc's wording), so the tally says what is wrong with it.
    const int64_t listed = video_ ? video_->info().container_frames : 0;
    std::string truncated;
    if (listed > n) {
      truncated = " (its header lists " + std::to_string(listed) + ": the file is truncated)";
    } else if (video_) {
      try {
        check_video_integrity(video_->info(), /*keep_truncated=*/false);
      } catch (const Error& e) {
        if (classify_video_error(e.what()) == BadVideoReason::truncated)
          truncated = " (the file is truncated: its frames end before its container's duration)";
      }
    }
    throw Error("video: ", entry.path, ": too short: the frame range [", entry.start_frame, ", ", end, ")",
                entry.list_line > 0 ? " (list line " + std::to_string(entry.list_line) + ")" : std::string(),
                " does not fit its ", n, " frames", truncated,
                Hint("fix sframe/eframe in the list (eframe is one past the last frame), or drop the clip"));
  }
  first_ = entry.start_frame;
  frames_ = end - entry.start_frame;
}

ListedVideo::~ListedVideo() = default;

const VideoInfo& ListedVideo::source_info() const { return video_ ? video_->info() : folder_info_; }

Clip ListedVideo::decode(const std::vector<int64_t>& indices, const DecodeOptions& options) {
  std::vector<int64_t> source(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= frames_)
      throw Error("video: ", path_, ": too short: clip frame ", indices[i], " asked for, the clip has ", frames_,
                  " frames");
    source[i] = first_ + indices[i];
  }
  return video_ ? video_->decode(source, options) : folder_->decode(source, options);
}

}  // namespace unmask::video
