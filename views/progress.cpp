#include "views/progress.h"

#include <unistd.h>

namespace ddpbench {

ProgressSink::ProgressSink(int fd) : fd_(fd), enabled_(isatty(fd) == 1) {}

void ProgressSink::on_progress(const std::string& case_name, const std::string& what, int done, int total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  // Redrawing more than ten times a second costs time and shows nothing more.
  if (done != total && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const std::string line = "\r\033[K" + case_name + "  " + what + "  " + std::to_string(done) + "/" +
                           std::to_string(total);
  [[maybe_unused]] auto n = ::write(fd_, line.data(), line.size());
}

void ProgressSink::clear() {
  if (!enabled_) return;
  static const char erase[] = "\r\033[K";
  [[maybe_unused]] auto n = ::write(fd_, erase, sizeof(erase) - 1);
}

void ProgressSink::on_finish(const RunRecord&) { clear(); }

}  // namespace ddpbench
