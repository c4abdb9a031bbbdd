// Private-file secret hand-off for same-host jobs without WEFT_SECRET (see job_secret.h).
#include "core/job_secret.h"
#include "common/settings.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace weft {
namespace {

// A directory only this user can use: created 0700 if missing, refused if another user owns
// it or others may write or read it (a planted directory would leak or swap the secret).
Status CheckPrivateDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return SystemError("cannot create " + dir + ": " + strerror(errno));
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return SystemError("cannot stat " + dir + ": " + strerror(errno));
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0)
    return SystemError(dir + " is not a private directory of this user (owner uid " +
                       std::to_string(st.st_uid) + ", mode " + std::to_string(st.st_mode & 0777) +
                       "): refusing to keep the job secret there");
  return OkStatus();
}

std::string HashHex(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

StatusOr<std::string> PrivateSecretPath(const std::string& job_key) {
  std::string dir;
  if (std::string d = SettingText("WEFT_SECRET_DIR"); !d.empty()) dir = d;
  else if (std::string x = SettingText("XDG_RUNTIME_DIR"); !x.empty()) dir = x;
  else dir = "/tmp/weft-" + std::to_string(geteuid());
  WEFT_RETURN_IF_ERROR(CheckPrivateDir(dir));
  return dir + "/weft-secret-" + HashHex(job_key);
}

Status PublishPrivateSecret(const std::string& path, const net::Secret& secret) {
  std::string tmp = path + ".tmp" + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return SystemError("cannot create " + tmp + ": " + strerror(errno));
  ssize_t n = write(fd, secret.bytes, sizeof(secret.bytes));
  close(fd);
  if (n != static_cast<ssize_t>(sizeof(secret.bytes)) || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return SystemError("cannot write " + path);
  }
  return OkStatus();
}

StatusOr<net::Secret> ReadPrivateSecret(const std::string& path, double timeout_s, time_t not_before) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st;
      net::Secret s;
      bool fresh = fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 077) == 0 &&
                   st.st_mtime >= not_before;
      ssize_t n = fresh ? read(fd, s.bytes, sizeof(s.bytes)) : -1;
      close(fd);
      if (n == static_cast<ssize_t>(sizeof(s.bytes))) return s;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return Status(weftSystemError,
                    "no job secret from rank 0 in " + path + " after " +
                        std::to_string(static_cast<int>(timeout_s)) +
                        " s (without WEFT_SECRET, same-host ranks get it from rank 0 through "
                        "this private file: is rank 0 running, as this user, on this host?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace weft
