// tests/jpeg_test_util.h: writes RGB frames as JPEG files (libturbojpeg, quality 100, 4:4:4, so
// smooth test images come back within a few levels) for the frame-folder tests.
#pragma once
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace unmask::test {

/// rgb: uint8 [h, w, 3]. A failed compression fails the calling test.
inline void write_jpeg(const std::string& path, const std::vector<uint8_t>& rgb, int w, int h) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(0, tjCompress2(tj, rgb.data(), w, w * 3, h, TJPF_RGB, &buf, &size, TJSAMP_444, 100, 0));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(buf), std::streamsize(size));
  tjFree(buf);
  tjDestroy(tj);
}

}  // namespace unmask::test
