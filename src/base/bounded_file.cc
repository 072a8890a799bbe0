// readBoundedFile (bounded_file.hpp).
#include "base/bounded_file.hpp"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "base/bounded_text.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

std::string readBoundedFile(const std::string& path, const std::string& what, uint64_t maxBytes) {
  const std::string where = what + " " + quotedPath(path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) detail::throwSystemError(errno, where + ": cannot open");
  const std::streamoff size = in.tellg();
  if (size < 0) detail::throwSystemError(errno, where + ": cannot read its size");
  if (static_cast<uint64_t>(size) > maxBytes)
    MESHCOMM_THROW(ErrorCode::InvalidUsage, where, ": ", size, " bytes, more than the limit of ", maxBytes);
  in.seekg(0);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) detail::throwSystemError(errno, where + ": cannot read");
  std::string contents = text.str();
  if (contents.size() > maxBytes)  // grew while it was read
    MESHCOMM_THROW(ErrorCode::InvalidUsage, where, ": more than the limit of ", maxBytes, " bytes");
  return contents;
}

}  // namespace meshcomm
