#include "models/model_spec.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "base/errors.h"

namespace ddpbench {

namespace {

// Keys that describe a spec; anything else in a sidecar or --model-set is a mistake worth a line.
const std::set<std::string>& spec_keys() {
  static const std::set<std::string> keys = {"name", "input", "target", "vocab", "loss", "optimizer", "lr",
                                             "momentum", "weight_decay", "global_batch", "flops_per_sample", "frozen"};
  return keys;
}
// Keys ddpbench-export writes for the reader (where the model came from): kept out of the spec.
const std::set<std::string>& note_keys() {
  static const std::set<std::string> keys = {"format", "exported_from", "export_method", "torch_version"};
  return keys;
}
constexpr const char* kFormat = "ddpbench-model/1";

// The shortest decimal that reads back as `v` (0.9, not 0.90000000000000002).
std::string format_number(double v) {
  for (int digits = 6;; ++digits) {
    std::ostringstream out;
    out.precision(digits);
    out << v;
    if (digits >= 17 || std::strtod(out.str().c_str(), nullptr) == v) return out.str();
  }
}

class SpecReader {
 public:
  // The settings are copied: a reader may be made from a temporary map (one key's sub-value, as
  // class:N's N), and its error messages quote from it after that map is gone.
  SpecReader(std::map<std::string, std::string> settings, std::string source)
      : settings_(std::move(settings)), source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw UsageError("--model: " + source_ + ": '" + key + "' " + what);
  }
  const std::string* find(const std::string& key) const {
    auto it = settings_.find(key);
    return it == settings_.end() ? nullptr : &it->second;
  }
  double number(const std::string& key, double fallback, double min, bool whole = false) const {
    const std::string* text = find(key);
    if (text == nullptr) return fallback;
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(text->c_str(), &end);
    if (text->empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || std::isspace(static_cast<unsigned char>((*text)[0]))) {
      fail(key, "is not a number: '" + *text + "'");
    }
    if (v < min) fail(key, "must be at least " + format_number(min) + ", got " + *text);
    if (whole && (v != std::floor(v) || v > 9.0e15)) fail(key, "must be a whole number, got " + *text);
    return v;
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    const std::string* t = find(key);
    return t == nullptr ? fallback : *t;
  }

 private:
  std::map<std::string, std::string> settings_;
  std::string source_;
};

std::vector<std::int64_t> parse_shape(const SpecReader& reader, const std::string& key, const std::string& text) {
  std::vector<std::int64_t> shape;
  std::stringstream in(text);
  std::string dim;
  while (std::getline(in, dim, 'x')) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(dim.c_str(), &end, 10);
    if (dim.empty() || *end != '\0' || errno == ERANGE || v < 1 || v > (1LL << 31) || !std::isdigit(static_cast<unsigned char>(dim[0]))) {
      reader.fail(key, "has a bad shape '" + text + "' (expected sizes joined by x, as 3x224x224)");
    }
    shape.push_back(v);
  }
  if (shape.empty() || text.back() == 'x') reader.fail(key, "has a bad shape '" + text + "' (expected sizes joined by x, as 3x224x224)");
  return shape;
}

std::string join_shape(const std::vector<std::int64_t>& shape) {
  std::string out;
  for (auto d : shape) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

}  // namespace

std::map<std::string, std::string> read_model_sidecar(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("--model: cannot read the sidecar " + path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("--model: " + path + " is not JSON: " + std::string(e.what()).substr(0, 160));
  }
  if (!doc.is_object()) throw UsageError("--model: " + path + ": expected a JSON object of settings");
  std::map<std::string, std::string> settings;
  for (const auto& [key, value] : doc.items()) {
    if (note_keys().count(key) != 0) {
      if (key == "format" && value != kFormat) {
        throw UsageError("--model: " + path + ": 'format' is " + value.dump() + ", this ddpbench reads " + kFormat);
      }
      continue;
    }
    if (spec_keys().count(key) == 0) throw UsageError("--model: " + path + ": unknown key '" + key + "'");
    if (value.is_string()) {
      settings[key] = value.get<std::string>();
    } else if (value.is_number()) {
      settings[key] = value.is_number_integer() ? value.dump() : format_number(value.get<double>());
    } else {
      throw UsageError("--model: " + path + ": '" + key + "' must be a string or a number, got " + value.dump());
    }
  }
  return settings;
}

void apply_model_setting(const std::string& assignment, std::map<std::string, std::string>& settings) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == assignment.size()) {
    throw UsageError("--model-set: expected KEY=VALUE, got '" + assignment + "'");
  }
  const std::string key = assignment.substr(0, eq);
  if (spec_keys().count(key) == 0) {
    std::string known;
    for (const auto& k : spec_keys()) known += (known.empty() ? "" : ", ") + k;
    throw UsageError("--model-set: unknown key '" + key + "' (known: " + known + ")");
  }
  settings[key] = assignment.substr(eq + 1);
}

ModelSpec parse_model_spec(const std::map<std::string, std::string>& settings, const std::string& default_name,
                           const std::string& source) {
  const SpecReader r(settings, source);
  ModelSpec spec;
  spec.name = r.text("name", default_name);
  if (spec.name.empty() || spec.name.find_first_of("/,:= \t\n") != std::string::npos) {
    r.fail("name", "'" + spec.name + "' cannot name a workload (no '/', ',', ':', '=' or blanks)");
  }

  const std::string* input = r.find("input");
  if (input == nullptr) {
    r.fail("input", "is missing: say what one sample is, as float:3x224x224 (images) or tokens:128 (token ids)");
  }
  const auto colon = input->find(':');
  const std::string kind = input->substr(0, colon);
  if (colon == std::string::npos || (kind != "float" && kind != "tokens")) {
    r.fail("input", "must be float:SHAPE or tokens:LENGTH, got '" + *input + "'");
  }
  spec.input = kind == "float" ? ModelSpec::Input::Float : ModelSpec::Input::Tokens;
  spec.input_shape = parse_shape(r, "input", input->substr(colon + 1));
  if (spec.input == ModelSpec::Input::Tokens && spec.input_shape.size() != 1) {
    r.fail("input", "tokens:LENGTH takes one length, got '" + *input + "'");
  }
  spec.vocab = static_cast<std::int64_t>(r.number("vocab", 0, 2, /*whole=*/true));

  const std::string target = r.text("target", "");
  if (target.rfind("class:", 0) == 0) {
    spec.target = ModelSpec::Target::Class;
    SpecReader classes_reader({{"target", target.substr(6)}}, source);
    spec.classes = static_cast<std::int64_t>(classes_reader.number("target", 0, 2, /*whole=*/true));
  } else if (target == "next-token") {
    spec.target = ModelSpec::Target::NextToken;
  } else if (target == "regression") {
    spec.target = ModelSpec::Target::Regression;
  } else {
    r.fail("target", target.empty() ? "is missing: class:N, next-token or regression"
                                     : "must be class:N, next-token or regression, got '" + target + "'");
  }
  if (spec.input == ModelSpec::Input::Tokens && spec.vocab == 0) {
    r.fail("vocab", "is missing: token inputs need the vocabulary size their ids are drawn below");
  }
  if (spec.input == ModelSpec::Input::Float && r.find("vocab") != nullptr) {
    r.fail("vocab", "applies to token inputs only, and 'input' is " + *input);
  }
  if (spec.target == ModelSpec::Target::NextToken && spec.input != ModelSpec::Input::Tokens) {
    r.fail("target", "next-token needs token inputs (input tokens:LENGTH), and 'input' is " + *input);
  }

  const std::string loss = r.text("loss", spec.target == ModelSpec::Target::Regression ? "mse" : "cross-entropy");
  if (loss == "cross-entropy") {
    spec.loss = ModelSpec::Loss::CrossEntropy;
    if (spec.target == ModelSpec::Target::Regression) r.fail("loss", "cross-entropy needs a class or next-token target");
  } else if (loss == "mse") {
    spec.loss = ModelSpec::Loss::Mse;
    if (spec.target != ModelSpec::Target::Regression) r.fail("loss", "mse needs a regression target, and 'target' is " + target);
  } else {
    r.fail("loss", "must be cross-entropy or mse, got '" + loss + "'");
  }

  const std::string optimizer = r.text("optimizer", "sgd");
  if (optimizer == "sgd") {
    spec.optimizer = ModelSpec::Optimizer::Sgd;
  } else if (optimizer == "adamw") {
    spec.optimizer = ModelSpec::Optimizer::AdamW;
    if (r.find("momentum") != nullptr) r.fail("momentum", "applies to sgd, and 'optimizer' is adamw");
  } else {
    r.fail("optimizer", "must be sgd or adamw, got '" + optimizer + "'");
  }
  spec.lr = r.number("lr", spec.optimizer == ModelSpec::Optimizer::Sgd ? 0.01 : 1e-3, 0);
  if (spec.lr <= 0) r.fail("lr", "must be more than 0");
  spec.momentum = r.number("momentum", spec.optimizer == ModelSpec::Optimizer::Sgd ? 0.9 : 0, 0);
  if (spec.optimizer == ModelSpec::Optimizer::Sgd && spec.momentum <= 0) {
    r.fail("momentum", "must be more than 0 (ddpbench's SGD is SGD with momentum)");
  }
  spec.weight_decay = r.number("weight_decay", spec.optimizer == ModelSpec::Optimizer::Sgd ? 0 : 0.01, 0);
  spec.global_batch = static_cast<std::int64_t>(r.number("global_batch", 32, 1, /*whole=*/true));
  spec.flops_per_sample = r.number("flops_per_sample", 0, 0);
  const std::string frozen = r.text("frozen", "keep");
  if (frozen != "keep" && frozen != "train") r.fail("frozen", "must be keep or train, got '" + frozen + "'");
  spec.train_frozen = frozen == "train";
  return spec;
}

std::map<std::string, std::string> ModelSpec::settings() const {
  std::map<std::string, std::string> s;
  s["name"] = name;
  s["input"] = std::string(input == Input::Float ? "float:" : "tokens:") + join_shape(input_shape);
  if (vocab > 0) s["vocab"] = std::to_string(vocab);
  s["target"] = target == Target::Class ? "class:" + std::to_string(classes) : target == Target::NextToken ? "next-token" : "regression";
  s["loss"] = loss == Loss::CrossEntropy ? "cross-entropy" : "mse";
  s["optimizer"] = optimizer == Optimizer::Sgd ? "sgd" : "adamw";
  s["lr"] = format_number(lr);
  if (optimizer == Optimizer::Sgd) s["momentum"] = format_number(momentum);
  s["weight_decay"] = format_number(weight_decay);
  s["global_batch"] = std::to_string(global_batch);
  s["flops_per_sample"] = format_number(flops_per_sample);
  s["frozen"] = train_frozen ? "train" : "keep";
  return s;
}

std::string ModelSpec::summary() const {
  const auto s = settings();
  std::string out = "input " + s.at("input") + (vocab > 0 ? " (vocab " + s.at("vocab") + ")" : "") + ", target " +
                    s.at("target") + ", " + s.at("loss") + ", " + s.at("optimizer") + " lr " + s.at("lr");
  if (optimizer == Optimizer::Sgd) out += " momentum " + s.at("momentum");
  if (weight_decay > 0) out += " weight decay " + s.at("weight_decay");
  return out;
}

}  // namespace ddpbench
