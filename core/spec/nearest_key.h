#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dslaunch::spec {

// Levenshtein distance (insertions, deletions, substitutions), ASCII
// case-insensitive.
int edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `key`, if it is close enough to be a plausible
// typo (distance <= max(2, len/3)); "" otherwise. Ties go to the earlier
// candidate.
std::string nearest_key(std::string_view key, const std::vector<std::string>& candidates);

}  // namespace dslaunch::spec
