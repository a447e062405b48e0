// data/video/video_list.cc: list-file parsing (formats in video_list.h).
#include "data/video/video_list.h"

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "unmask/error.h"

namespace unmask::video {

namespace {

struct FormatInfo {
  ListFormat format;
  const char* name;
  const char* layout;  // what a line holds, for errors and --help
  const char* origin;
};

constexpr FormatInfo kFormats[] = {
    {ListFormat::videomae, "videomae", "'path label'", "VideoMAE v1, space-separated"},
    {ListFormat::vswift, "vswift", "'path,label'", "V-SWIFT csv"},
    {ListFormat::vswift4, "vswift4", "'path label sframe eframe'", "V-SWIFT, frames [sframe, eframe)"},
    {ListFormat::vswift6, "vswift6", "'source path label sframe eframe nframes'", "V-SWIFT with dataset and length"},
    {ListFormat::videomae2, "videomae2", "'path start_idx total_frames'",
     "VideoMAE v2 pretraining: 'path 0 -1' a video, else a JPEG frame folder"},
    {ListFormat::rawframes, "rawframes", "'folder total_frames label'", "VideoMAE v2 / mmaction2 JPEG frame folders"},
    {ListFormat::automatic, "auto", "", "from the first line"},
};

const FormatInfo& info_of(ListFormat f) {
  for (const FormatInfo& i : kFormats)
    if (i.format == f) return i;
  throw Error("video list: unknown ListFormat ", int(f));
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_separator(char c) { return is_blank(c) || c == ','; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// Splits the last field off `line` (a field separator: a run of blanks, or a comma with blanks
// around it). Returns false when no non-empty field with a non-empty rest before it exists.
bool pop_right(std::string_view* line, std::string_view* field) {
  std::string_view s = *line;
  size_t end = s.size();
  size_t begin = end;
  while (begin > 0 && !is_separator(s[begin - 1])) --begin;
  if (begin == end || begin == 0) return false;
  size_t rest = begin;
  while (rest > 0 && is_blank(s[rest - 1])) --rest;
  if (rest > 0 && s[rest - 1] == ',') --rest;
  while (rest > 0 && is_blank(s[rest - 1])) --rest;
  if (rest == 0 || s[rest - 1] == ',') return false;  // nothing before, or an empty field (",,")
  *field = s.substr(begin, end - begin);
  *line = s.substr(0, rest);
  return true;
}

// Splits the first field off `line` (same separators); false when nothing follows it.
bool pop_left(std::string_view* line, std::string_view* field) {
  std::string_view s = *line;
  size_t end = 0;
  while (end < s.size() && !is_separator(s[end])) ++end;
  if (end == 0 || end == s.size()) return false;
  size_t rest = end;
  while (rest < s.size() && is_blank(s[rest])) ++rest;
  if (rest < s.size() && s[rest] == ',') ++rest;
  while (rest < s.size() && is_blank(s[rest])) ++rest;
  if (rest == s.size() || s[rest] == ',') return false;  // nothing after, or an empty field (",,")
  *field = s.substr(0, end);
  *line = s.substr(rest);
  return true;
}

bool parse_int(std::string_view s, int64_t* out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

// Integer fields at the end of `line` that leave a non-empty rest (at most 7), the last one's
// value and the rest.
struct Trailing {
  int count = 0;
  int64_t last = 0;
  std::string_view rest;
};
Trailing trailing_integers(std::string_view line) {
  Trailing t;
  std::string_view field, rest = line;
  int64_t v = 0;
  while (t.count < 7 && pop_right(&rest, &field) && parse_int(field, &v)) {
    if (t.count++ == 0) t.last = v;
    line = rest;
  }
  t.rest = line;
  return t;
}

ListFormat detect(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  std::string_view first;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    first = trim(line);
    if (!first.empty()) break;
  }
  const bool csv = name.size() >= 4 && name.compare(name.size() - 4, 4, ".csv") == 0;
  const std::string hint = "pass --list-format (" + list_format_help() + ")";
  const Trailing t = trailing_integers(first);
  std::string_view head = t.rest, field;
  const bool one_field_head = !pop_left(&head, &field);  // a numeric path behind a source name
  switch (t.count) {
    case 0:  // no label at all: the videomae parser reports the line
    case 1:
      return csv && first.find(',') != std::string_view::npos ? ListFormat::vswift : ListFormat::videomae;
    case 2:
      if (t.last == -1) return ListFormat::videomae2;  // 'path 0 -1': a rawframes label is never -1
      throw Error("video list ", name, ":", line_no, ": 'X N M' lines are either VideoMAE v2 pretraining ",
                  "('path start_idx total_frames') or frame folders ('folder total_frames label'): got '",
                  std::string(first.substr(0, 80)), "'",
                  Hint("pass --list-format videomae2 or --list-format rawframes"));
    case 3:
      return ListFormat::vswift4;
    case 4:
      return ListFormat::vswift6;
    case 5:
      if (one_field_head) return ListFormat::vswift6;  // 'ssv2 74225 3 0 30 30'
      [[fallthrough]];
    default:
      throw Error("video list ", name, ":", line_no, ": no known list format ends in ", t.count,
                  t.count == 7 ? " or more" : "", " numbers: '", std::string(first.substr(0, 80)), "'", Hint(hint));
  }
}

}  // namespace

const char* list_format_name(ListFormat format) { return info_of(format).name; }

ListFormat parse_list_format(const std::string& name) {
  for (const FormatInfo& i : kFormats)
    if (name == i.name) return i.format;
  throw Error("--list-format must be one of videomae, vswift, vswift4, vswift6, videomae2, rawframes or auto, got '", name,
              "'", Hint(list_format_help()));
}

std::string list_format_help() {
  std::string s;
  for (const FormatInfo& i : kFormats) {
    if (i.format == ListFormat::automatic) continue;
    if (!s.empty()) s += "; ";
    s += std::string(i.name) + ": " + i.layout + " (" + i.origin + ")";
  }
  return s + "; auto: from the first line";
}

std::vector<ListEntry> parse_video_list(const std::string& text, const std::string& name, ListFormat format,
                                        const std::string& root) {
  if (format == ListFormat::automatic) format = detect(text, name);
  const FormatInfo& fi = info_of(format);
  const std::string fmt_name = std::string(fi.layout) + " lines (" + fi.origin + ")";
  std::vector<ListEntry> out;
  std::istringstream in(text);
  std::string raw;
  int64_t line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::string_view line = trim(raw);
    if (line.empty()) continue;
    auto where = [&] { return name + ":" + std::to_string(line_no); };
    auto bad_line = [&](const std::string& hint) {
      return Error("video list ", where(), ": expected ", fmt_name, ", got '", std::string(line.substr(0, 80)), "'",
                   Hint(hint));
    };
    auto integer = [&](std::string_view field, const char* what, int64_t lo) {
      int64_t v = 0;
      if (!parse_int(field, &v) || v < lo)
        throw Error("video list ", where(), ": ", what, " '", std::string(field.substr(0, 40)), "' is not ",
                    lo == 0 ? "a non-negative integer" : lo == 1 ? "a positive integer" : "an integer >= -1",
                    Hint("expected " + fmt_name));
      return v;
    };
    ListEntry e;
    e.list_line = line_no;
    std::string_view path;
    if (format == ListFormat::videomae || format == ListFormat::vswift) {
      // Two fields split at the last separator (a path may hold the other kind): a comma for
      // vswift, a space or a tab for videomae.
      const auto cut = format == ListFormat::vswift ? line.rfind(',') : line.find_last_of(" \t");
      if (cut == std::string_view::npos || cut == 0)
        throw bad_line(format == ListFormat::vswift ? "separate path and label with a comma"
                                                    : "separate path and label with a space");
      path = trim(line.substr(0, cut));
      e.label = integer(trim(line.substr(cut + 1)), "label", 0);
    } else {
      const int numbers = format == ListFormat::vswift4 ? 3 : format == ListFormat::vswift6 ? 4 : 2;
      std::string_view rest = line, field[4];
      for (int i = numbers - 1; i >= 0; --i)
        if (!pop_right(&rest, &field[i]))
          throw bad_line(std::to_string(numbers) + " numbers must follow the path, separated by spaces or commas");
      if (format == ListFormat::vswift6) {
        std::string_view source;
        if (!pop_left(&rest, &source)) throw bad_line("the line must start with the dataset name, then the path");
        e.source = std::string(source);
      }
      path = rest;
      if (format == ListFormat::vswift4 || format == ListFormat::vswift6) {
        e.label = integer(field[0], "label", 0);
        e.start_frame = integer(field[1], "sframe", 0);
        e.end_frame = integer(field[2], "eframe", -1);
        if (e.end_frame != -1 && e.end_frame <= e.start_frame)
          throw Error("video list ", where(), ": the frame range [", e.start_frame, ", ", e.end_frame, ") is empty",
                      Hint("eframe is one past the last frame and must exceed sframe (or be -1: to the end)"));
        if (format == ListFormat::vswift6) {
          e.total_frames = integer(field[3], "nframes", 1);
          if (e.end_frame > e.total_frames || e.start_frame >= e.total_frames)
            throw Error("video list ", where(), ": the frame range [", e.start_frame, ", ", e.end_frame,
                        ") passes the video's ", e.total_frames, " frames (nframes)",
                        Hint("sframe < eframe <= nframes; check the list"));
        }
      } else if (format == ListFormat::videomae2) {
        const int64_t start = integer(field[0], "start_idx", 0);
        const int64_t total = integer(field[1], "total_frames", -1);
        if (total == 0)
          throw Error("video list ", where(), ": total_frames is 0", Hint("-1 for a video file, else the frame count"));
        if (total == -1 && start != 0)
          throw Error("video list ", where(), ": a video file ('total_frames' -1) must start at 0, got start_idx ",
                      start, Hint("VideoMAE v2 lists a video file as 'path 0 -1'"));
        if (start > INT32_MAX) throw Error("video list ", where(), ": start_idx ", start, " is too large");
        if (total > 0) {  // a frame folder: files start_idx .. start_idx + total - 1
          e.frame_folder = true;
          e.first_number = int(start);
          e.total_frames = total;
        }
      } else {  // rawframes
        e.frame_folder = true;
        e.total_frames = integer(field[0], "total_frames", 1);
        e.label = integer(field[1], "label", 0);
      }
    }
    if (path.empty()) throw Error("video list ", where(), ": empty path", Hint("each line must start with a path"));
    e.path = std::string(path);
    if (!root.empty() && std::filesystem::path(e.path).is_relative())
      e.path = (std::filesystem::path(root) / e.path).string();
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<ListEntry> read_video_list(const std::string& file, ListFormat format, const std::string& root) {
  std::ifstream f(file, std::ios::binary);
  if (!f) throw Error("video list: cannot open ", file, Hint("check the path"));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_video_list(ss.str(), file, format, root);
}

}  // namespace unmask::video
