// data/video/video_list.h: the list files that name a video dataset, in the formats of the projects
// unmask's users come from, parsed into one ListEntry per clip.
//
//   auto list = video::read_video_list("train.csv", video::ListFormat::automatic, "/data/k400");
//   video::ListFormat f = video::parse_list_format("vswift4");   // from a --list-format value
//
// The formats (one clip per line; blank lines skipped; \r\n accepted):
//   videomae   "path label"                            VideoMAE v1 (a space or a tab; the label is the
//                                                      last field, so a path may hold spaces)
//   vswift     "path,label"                            V-SWIFT's csv (the label is after the last comma)
//   vswift4    "path label sframe eframe"              V-SWIFT: frames [sframe, eframe) of the video
//   vswift6    "source path label sframe eframe nframes"
//                                                      V-SWIFT: the same plus the dataset the clip comes
//                                                      from and the video's frame count (sframe < eframe
//                                                      <= nframes is checked on the line; the range must
//                                                      then fit the frames the file decodes to, which
//                                                      are what an eframe of -1 runs to)
//   videomae2  "path start_idx total_frames"           VideoMAE v2 pretraining: "path 0 -1" is a video
//                                                      file; total_frames > 0 is a folder of JPEG frames
//                                                      numbered from start_idx (label 0: pretraining)
//   rawframes  "folder total_frames label"             VideoMAE v2 / mmaction2 fine-tuning on frame
//                                                      folders (SSv2): frames numbered from 1
// In the multi-column formats a field separator is a run of spaces/tabs or a comma; the numeric
// fields are taken from the right (and vswift6's source from the left), so paths may hold spaces.
// An eframe of -1 means "to the end of the video". Frame ranges are end-exclusive, like Python's
// range and the AVION/V-SWIFT samplers, so [sframe, eframe) holds eframe - sframe frames.
//
// automatic picks the format from the first line: the number of integer fields at its end is 1
// for videomae/vswift (vswift when the file ends in .csv and the line has a comma, as before), 3
// for vswift4, 4 for vswift6 (5 when the path itself is a number and one field precedes it); 2
// ending in -1 is videomae2 ('path 0 -1'), any other 2 is ambiguous between videomae2 and
// rawframes, so it is an error asking for --list-format.
//
// Every malformed line throws an Error naming file:line, what was expected and what was found.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace unmask::video {

enum class ListFormat {
  videomae,   // "path label"
  vswift,     // "path,label"
  vswift4,    // "path label sframe eframe"
  vswift6,    // "source path label sframe eframe nframes"
  videomae2,  // "path start_idx total_frames"
  rawframes,  // "folder total_frames label"
  automatic,  // from the first line (above)
};

/// "videomae", "vswift", ... (the --list-format names).
const char* list_format_name(ListFormat format);
/// The --list-format value -> the format; an unknown name throws an Error listing the names.
ListFormat parse_list_format(const std::string& name);
/// One line per format: "videomae: 'path label' (VideoMAE v1)" ... for --help texts.
std::string list_format_help();

struct ListEntry {
  std::string path;  // a video file or a frame folder; relative paths are joined to `root` when one is given
  int64_t label = 0;
  int64_t start_frame = 0;     // first frame of the clip in the source
  int64_t end_frame = -1;      // one past the clip's last frame; -1 = the source's end
  int64_t total_frames = -1;   // frames the list says the source has; -1 = not given (count them)
  bool frame_folder = false;   // a folder of JPEG frames (file names from a template), not a video file
  int first_number = 1;        // frame folders: the file number of frame 0 (img_00001.jpg is 1)
  std::string source;          // vswift6: the dataset the clip comes from ("k400", ...); else empty
  int64_t list_line = 0;       // the line of the list file it came from (for errors found when opening it)
  bool has_range() const { return start_frame != 0 || end_frame != -1; }
};

/// Reads a list file. Blank lines are skipped; any other malformed line (missing label,
/// non-integer or negative label, empty path, a bad frame range) throws an Error naming file:line.
std::vector<ListEntry> read_video_list(const std::string& file, ListFormat format, const std::string& root = "");
/// The same on text (for tests and the fuzzer); `name` appears in errors.
std::vector<ListEntry> parse_video_list(const std::string& text, const std::string& name, ListFormat format,
                                        const std::string& root = "");

}  // namespace unmask::video
