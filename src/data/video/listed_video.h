// data/video/listed_video.h: one list entry (video_list.h) opened for decoding: a video file through
// VideoReader or a JPEG frame folder through FrameFolderReader, seen through the entry's frame
// range, so that everything downstream (prepare-video, the clip loader's samplers) works on the
// clip's frames 0 .. frames() - 1 and never needs to know where the clip starts.
//
//   video::ListedVideo v(entry, "img_{:05}.jpg");
//   int64_t n = v.frames();                    // eframe - sframe (or the source's length)
//   video::Clip c = v.decode({0, 4, 8}, opt);  // source frames first_frame() + {0, 4, 8}
//
// Errors are unmask::Error in decode.h's wording, so classify_video_error sorts them the same way:
// a range past the source's end or a folder with fewer frames than the list says is "too short",
// a missing file or folder is "missing".
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/video/decode.h"
#include "data/video/video_list.h"

namespace unmask::video {

/// VideoMAE v2's --fname_tmpl default: img_00001.jpg, img_00002.jpg, ...
inline constexpr const char* kDefaultFrameTemplate = "img_{:05}.jpg";

class ListedVideo {
 public:
  /// Opens the file or folder and checks the entry's range against it. `frame_template` names
  /// the files of frame folders (decode.h's FrameFolderReader).
  explicit ListedVideo(const ListEntry& entry, const std::string& frame_template = kDefaultFrameTemplate);
  ~ListedVideo();
  ListedVideo(const ListedVideo&) = delete;
  ListedVideo& operator=(const ListedVideo&) = delete;

  /// The whole source (every frame of the file or the folder's run of frames).
  const VideoInfo& source_info() const;
  int64_t first_frame() const { return first_; }  // source frame of the clip's frame 0
  int64_t frames() const { return frames_; }      // frames in the clip (> 0)
  /// Clip frames `indices` (each in [0, frames()), any order, repeats allowed) as uint8 [T, H, W, 3].
  Clip decode(const std::vector<int64_t>& indices, const DecodeOptions& options = {});

 private:
  std::string path_;
  std::unique_ptr<VideoReader> video_;
  std::unique_ptr<FrameFolderReader> folder_;
  VideoInfo folder_info_;  // the folder's info, limited to the frames the list names
  int64_t first_ = 0, frames_ = 0;
};

}  // namespace unmask::video
