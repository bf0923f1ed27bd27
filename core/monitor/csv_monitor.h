#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "core/status.h"

namespace dslaunch::core {

// DeepSpeed's `csv_monitor`: one CSV file per series in a folder, named
// after the series' tag with '/' and ' ' as '_' ("Train/Samples/train_loss"
// -> Train_Samples_train_loss.csv), each line "step,value" under the header
// "step,<the tag's last part>". Files are appended to, so a resumed job
// continues its series; the header is written when a file is new. Not
// thread-safe.
class CsvMonitor {
 public:
  // Writes into `dir`, created (with its parents) on the first value.
  explicit CsvMonitor(std::string dir) : dir_(std::move(dir)) {}

  // Appends one value; an error names the file.
  Status add(std::string_view tag, int64_t step, double value);

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::set<std::string, std::less<>> seen_;  // files this monitor checked for a header
};

}  // namespace dslaunch::core
