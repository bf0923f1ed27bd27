#include "worker/data/demo_text.h"

#include <array>
#include <random>
#include <span>
#include <string_view>

namespace dslaunch::worker::data {
namespace {

struct Noun {
  std::string_view one;
  std::string_view many;
};

struct Verb {
  std::string_view third_person;  // she sees
  std::string_view base;          // they see
  std::string_view past;          // they saw
};

constexpr std::array kCreatures = {
    Noun{"cat", "cats"},       Noun{"dog", "dogs"},       Noun{"bird", "birds"},
    Noun{"fox", "foxes"},      Noun{"mouse", "mice"},     Noun{"horse", "horses"},
    Noun{"owl", "owls"},       Noun{"rabbit", "rabbits"}, Noun{"wolf", "wolves"},
    Noun{"goose", "geese"},    Noun{"child", "children"}, Noun{"teacher", "teachers"},
    Noun{"farmer", "farmers"}, Noun{"baker", "bakers"},   Noun{"sailor", "sailors"},
    Noun{"robot", "robots"},
};

constexpr std::array kThings = {
    Noun{"ball", "balls"}, Noun{"apple", "apples"}, Noun{"boat", "boats"}, Noun{"book", "books"},
    Noun{"hat", "hats"},   Noun{"key", "keys"},     Noun{"egg", "eggs"},   Noun{"box", "boxes"},
};

constexpr std::array kAdjectives = {
    "small",  "big",   "old",  "young",  "red",    "brown",  "quiet",   "happy",
    "clever", "brave", "lazy", "little", "gentle", "orange", "ancient", "tiny",
};

constexpr std::array kTransitive = {
    Verb{"sees", "see", "saw"},          Verb{"finds", "find", "found"},
    Verb{"likes", "like", "liked"},      Verb{"follows", "follow", "followed"},
    Verb{"carries", "carry", "carried"}, Verb{"watches", "watch", "watched"},
    Verb{"helps", "help", "helped"},     Verb{"paints", "paint", "painted"},
    Verb{"visits", "visit", "visited"},  Verb{"feeds", "feed", "fed"},
};

constexpr std::array kIntransitive = {
    Verb{"sleeps", "sleep", "slept"}, Verb{"runs", "run", "ran"},
    Verb{"sings", "sing", "sang"},    Verb{"waits", "wait", "waited"},
    Verb{"plays", "play", "played"},  Verb{"sits", "sit", "sat"},
    Verb{"walks", "walk", "walked"},
};

constexpr std::array kPlaces = {
    "in the garden",   "near the river", "under the old bridge", "on the hill",
    "behind the barn", "in the forest",  "at the market",        "by the lake",
};

constexpr std::array kTimes = {
    "every morning", "at night", "in the spring", "after lunch", "on sunday", "before dawn",
};

constexpr std::array kFeelings = {"hungry", "tired", "happy", "sad", "cold", "proud"};

struct Name {
  std::string_view name;
  std::string_view pronoun;
};

constexpr std::array kNames = {
    Name{"anna", "she"}, Name{"ben", "he"},   Name{"clara", "she"}, Name{"david", "he"},
    Name{"emma", "she"}, Name{"felix", "he"}, Name{"grace", "she"}, Name{"henry", "he"},
};

constexpr std::array kNumberWords = {"one",   "two",   "three", "four", "five",   "six",
                                     "seven", "eight", "nine",  "ten",  "eleven", "twelve"};

// Choices from a seeded std::mt19937_64, mapped to ranges by a
// multiply-shift rather than std::uniform_int_distribution, whose output
// differs between standard libraries.
class Choices {
 public:
  explicit Choices(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, n). Precondition: n >= 1.
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(engine_()) * n) >> 64);
  }
  bool percent(uint64_t chance) { return below(100) < chance; }
  template <typename Options>
  const auto& pick(const Options& options) {
    return options[below(options.size())];
  }

 private:
  std::mt19937_64 engine_;
};

enum class Tense { kPresent, kPast };

// A subject or object: who it is, how it is written and how it agrees.
struct Phrase {
  std::string text;
  bool plural = false;
  std::string_view pronoun;  // it, they, he, she
};

class Writer {
 public:
  Writer(uint64_t seed, std::string& out) : choose_(seed), out_(out) {}

  void paragraph() {
    tense_ = choose_.percent(50) ? Tense::kPresent : Tense::kPast;
    const uint64_t sentences = 4 + choose_.below(4);
    for (uint64_t i = 0; i < sentences; ++i) {
      if (i > 0) out_ += ' ';
      sentence();
    }
    out_ += '\n';
  }

 private:
  void sentence() {
    const size_t start = out_.size();
    switch (choose_.below(6)) {
      case 0:
        transitive();
        break;
      case 1:
        intransitive();
        break;
      case 2:
        count();
        break;
      case 3:
        sum();
        break;
      case 4:
        question();
        break;
      default:
        because();
        break;
    }
    capitalize(start);
  }

  // By hand, not std::toupper, whose result depends on the locale.
  void capitalize(size_t at) {
    char& c = out_[at];
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }

  // "the brave fox sees two apples near the river."
  void transitive() {
    const Phrase subject = noun_phrase(kCreatures);
    out_ += subject.text;
    out_ += ' ';
    out_ += verb(choose_.pick(kTransitive), subject.plural);
    out_ += ' ';
    out_ += noun_phrase(choose_.percent(50) ? std::span<const Noun>(kThings)
                                            : std::span<const Noun>(kCreatures))
                .text;
    if (choose_.percent(50)) {
      out_ += ' ';
      out_ += choose_.pick(kPlaces);
    }
    out_ += '.';
  }

  // "some owls sang by the lake at night."
  void intransitive() {
    const Phrase subject = noun_phrase(kCreatures);
    out_ += subject.text;
    out_ += ' ';
    out_ += verb(choose_.pick(kIntransitive), subject.plural);
    out_ += ' ';
    out_ += choose_.pick(kPlaces);
    if (choose_.percent(40)) {
      out_ += ' ';
      out_ += choose_.pick(kTimes);
    }
    out_ += '.';
  }

  // "grace has three little eggs." — the noun agrees with the number.
  void count() {
    const uint64_t n = 1 + choose_.below(kNumberWords.size());
    out_ += choose_.pick(kNames).name;
    out_ += tense_ == Tense::kPresent ? " has " : " had ";
    out_ += kNumberWords[n - 1];
    out_ += ' ';
    if (choose_.percent(40)) {
      out_ += choose_.pick(kAdjectives);
      out_ += ' ';
    }
    const Noun& noun = choose_.percent(50) ? choose_.pick(kThings) : choose_.pick(kCreatures);
    out_ += n == 1 ? noun.one : noun.many;
    out_ += '.';
  }

  // "4 and 5 make 9."
  void sum() {
    const uint64_t a = 1 + choose_.below(9);
    const uint64_t b = 1 + choose_.below(9);
    out_ +=
        std::to_string(a) + " and " + std::to_string(b) + " make " + std::to_string(a + b) + '.';
  }

  // "where are the red foxes? the red foxes are on the hill." — the answer
  // repeats the subject and agrees with it.
  void question() {
    const Phrase subject = definite_phrase(kCreatures);
    const std::string_view be = be_verb(subject.plural);
    out_ += "where ";
    out_ += be;
    out_ += ' ';
    out_ += subject.text;
    out_ += "? ";
    const size_t answer = out_.size();
    out_ += subject.text;
    capitalize(answer);
    out_ += ' ';
    out_ += be;
    out_ += ' ';
    out_ += choose_.pick(kPlaces);
    out_ += '.';
  }

  // "ben was tired because he carried a big box." — the pronoun agrees.
  void because() {
    const Phrase subject = choose_.percent(50) ? name_phrase() : definite_phrase(kCreatures);
    out_ += subject.text;
    out_ += ' ';
    out_ += be_verb(subject.plural);
    out_ += ' ';
    out_ += choose_.pick(kFeelings);
    out_ += " because ";
    out_ += subject.pronoun;
    out_ += ' ';
    out_ += verb(choose_.pick(kTransitive), subject.plural);
    out_ += ' ';
    out_ += noun_phrase(kThings).text;
    out_ += '.';
  }

  std::string_view verb(const Verb& v, bool plural) const {
    if (tense_ == Tense::kPast) return v.past;
    return plural ? v.base : v.third_person;
  }

  std::string_view be_verb(bool plural) const {
    if (tense_ == Tense::kPast) return plural ? "were" : "was";
    return plural ? "are" : "is";
  }

  Phrase name_phrase() {
    const Name& name = choose_.pick(kNames);
    return {std::string(name.name), false, name.pronoun};
  }

  // "the fox", "the old wolves"
  Phrase definite_phrase(std::span<const Noun> nouns) {
    const bool plural = choose_.percent(40);
    const Noun& noun = choose_.pick(nouns);
    std::string text = "the ";
    if (choose_.percent(50)) {
      text += choose_.pick(kAdjectives);
      text += ' ';
    }
    text += plural ? noun.many : noun.one;
    return {text, plural, plural ? "they" : "it"};
  }

  // "a brown dog", "an old owl", "the geese", "two hats", "some tiny mice"
  Phrase noun_phrase(std::span<const Noun> nouns) {
    const bool plural = choose_.percent(40);
    const Noun& noun = choose_.pick(nouns);
    std::string words;
    if (choose_.percent(50)) {
      words += choose_.pick(kAdjectives);
      words += ' ';
    }
    words += plural ? noun.many : noun.one;
    std::string determiner;
    switch (choose_.below(3)) {
      case 0:
        determiner = "the";
        break;
      case 1:
        determiner = plural ? "some" : (is_vowel(words[0]) ? "an" : "a");
        break;
      default:
        determiner = plural ? kNumberWords[1 + choose_.below(4)] : "my";
        break;
    }
    return {determiner + ' ' + words, plural, plural ? "they" : "it"};
  }

  static bool is_vowel(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u'; }

  Choices choose_;
  std::string& out_;
  Tense tense_ = Tense::kPresent;
};

}  // namespace

std::string generate_demo_text(uint64_t seed, int64_t min_bytes) {
  std::string text;
  text.reserve(static_cast<size_t>(min_bytes) + 1024);
  Writer writer(seed, text);
  while (static_cast<int64_t>(text.size()) < min_bytes) writer.paragraph();
  return text;
}

}  // namespace dslaunch::worker::data
