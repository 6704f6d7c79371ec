// PNG reading and writing (durably) through libpng's simplified API (png_image), which needs no setjmp error handling;
// libpng's own message is passed on with the file name.
#include <png.h>

#include <stdexcept>
#include <string>

#include "attncheck/durable_file.hpp"

#include "attncheck/heatmap.hpp"

namespace attncheck {

void write_png(const std::string& path, const Image& img) {
  if (img.width <= 0 || img.height <= 0 ||
      img.rgb.size() != static_cast<size_t>(img.width) * static_cast<size_t>(img.height) * 3)
    throw std::invalid_argument("write_png " + path + ": image is " + std::to_string(img.width) + "x" +
                                std::to_string(img.height) + " with " + std::to_string(img.rgb.size()) + " bytes");
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(img.width);
  image.height = static_cast<png_uint_32>(img.height);
  image.format = PNG_FORMAT_RGB;
  // Encoded in memory (first call sizes the buffer), then written durably (durable_file.hpp).
  png_alloc_size_t size = 0;
  std::string bytes;
  for (int pass = 0; pass < 2; ++pass) {
    if (!png_image_write_to_memory(&image, pass ? bytes.data() : nullptr, &size, 0, img.rgb.data(), 0, nullptr)) {
      const std::string msg = image.message;
      png_image_free(&image);
      throw std::runtime_error("write_png " + path + ": " + msg);
    }
    bytes.resize(size);
  }
  write_file_durably(path, bytes);
}

Image read_png(const std::string& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str()))
    throw std::runtime_error("read_png " + path + ": " + image.message);
  image.format = PNG_FORMAT_RGB;
  Image img;
  img.width = static_cast<int>(image.width);
  img.height = static_cast<int>(image.height);
  img.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, img.rgb.data(), 0, nullptr)) {
    const std::string msg = image.message;
    png_image_free(&image);
    throw std::runtime_error("read_png " + path + ": " + msg);
  }
  return img;
}

}  // namespace attncheck
