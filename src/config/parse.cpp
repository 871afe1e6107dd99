// Reading YAML into Config: a recursive walk over the document that looks every key up in the
// field table, so unknown keys, wrong types and misplaced maps are all reported with the full key
// path and the source (file path or "--set") in front.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include "config/config.h"
#include "config/fields.h"
#include "config/load.h"
#include "config/scalar.h"

namespace combiner::config {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string join_path(const std::string& section, const std::string& key) {
  return section.empty() ? key : section + "." + key;
}

std::string unknown_key(const std::string& source, const std::string& path) {
  const auto dot = path.rfind('.');
  const std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
  const std::string where = section.empty() ? "at the top level" : "in '" + section + "'";
  return source + ": unknown key '" + path + "'; valid keys " + where + ": " +
         join(section_keys(section));
}

// A section name given a scalar value, or a field given a map: both name what belongs there.
std::string not_a_section(const std::string& source,
                          const std::string& section,
                          const YAML::Node& node) {
  return source + ": '" + section + "' must be a map with keys " + join(section_keys(section)) +
         ", got " + describe_node(node);
}

void read_section(const YAML::Node& node,
                  const std::string& section,
                  const std::string& source,
                  Config& config) {
  if (node.IsNull()) return;  // "train:" with nothing under it sets nothing
  if (!node.IsMap()) throw std::invalid_argument(not_a_section(source, section, node));
  std::vector<std::string> seen;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar())
      throw std::invalid_argument(source + ": keys in '" + (section.empty() ? "<top>" : section) +
                                  "' must be plain names, got " + describe_node(entry.first));
    const std::string path = join_path(section, entry.first.Scalar());
    for (const auto& s : seen)
      if (s == path) throw std::invalid_argument(source + ": duplicate key '" + path + "'");
    seen.push_back(path);
    if (const Field* field = find_field(path)) {
      try {
        field->set(config, parse_scalar(entry.second, *field));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(source + ": " + e.what());
      }
    } else if (is_section(path)) {
      read_section(entry.second, path, source, config);
    } else {
      throw std::invalid_argument(unknown_key(source, path));
    }
  }
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::invalid_argument(path + ": cannot read config file (it is a directory)");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) throw std::invalid_argument(path + ": cannot read config file");
  return text.str();
}

// Counts the documents of a YAML stream through yaml-cpp's event parser. Not YAML::LoadAll:
// in yaml-cpp 0.7 (Debian 12) it loops forever, allocating a null document per turn, when the
// parser stops consuming tokens, e.g. on a lone "," or "{a: 1}," (jbeder/yaml-cpp#1040, fixed
// upstream in 2024). Here a document that starts where the previous one did means no progress
// and is reported as invalid YAML at that place.
class DocumentCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    stuck_ = documents_ > 0 && mark.pos == last_start_.pos;
    last_start_ = mark;
    ++documents_;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&,
                const std::string&,
                YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&,
                       const std::string&,
                       YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&,
                  const std::string&,
                  YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  size_t documents() const { return documents_; }
  bool stuck() const { return stuck_; }
  const YAML::Mark& last_start() const { return last_start_; }

 private:
  size_t documents_ = 0;
  bool stuck_ = false;
  YAML::Mark last_start_;
};

[[noreturn]] void invalid_yaml(const std::string& source,
                               const YAML::Mark& mark,
                               const std::string& what) {
  throw std::invalid_argument(source + ": invalid YAML at line " + std::to_string(mark.line + 1) +
                              ", column " + std::to_string(mark.column + 1) + ": " + what);
}

// The one document of yaml_text (a null node if there is none).
YAML::Node load_one_document(const std::string& yaml_text, const std::string& source) {
  try {
    std::istringstream in(yaml_text);
    YAML::Parser parser(in);
    DocumentCounter counter;
    while (parser.HandleNextDocument(counter)) {
      if (counter.stuck()) {
        const auto at = static_cast<size_t>(std::max(0, counter.last_start().pos));
        const std::string token = at < yaml_text.size() ? yaml_text.substr(at, 1) : "";
        invalid_yaml(source, counter.last_start(), "unexpected '" + token + "' at the top level");
      }
    }
    if (counter.documents() > 1)
      throw std::invalid_argument(source + ": expected one YAML document, got " +
                                  std::to_string(counter.documents()));
    return counter.documents() == 0 ? YAML::Node() : YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    invalid_yaml(source, e.mark, e.msg);
  }
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source) {
  const YAML::Node document = load_one_document(yaml_text, source);
  const std::string sections = join(section_keys(""));
  if (document.IsNull())
    throw std::invalid_argument(source + ": config is empty; expected a map with sections " +
                                sections);
  if (!document.IsMap())
    throw std::invalid_argument(source + ": expected a map with sections " + sections +
                                " at the top level, got " + describe_node(document));
  Config config;
  read_section(document, "", source, config);
  return config;
}

void apply_override(Config& config, const std::string& assignment) {
  const std::string source = "--set";
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument(source + ": expected key.path=value, got '" + assignment + "'");
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  const Field* field = find_field(path);
  if (!field) {
    if (is_section(path))
      throw std::invalid_argument(source + ": '" + path + "' is a section; set one of its keys: " +
                                  join(section_keys(path)));
    throw std::invalid_argument(unknown_key(source, path));
  }
  YAML::Node node;
  try {
    // An empty value means the empty string ("--set data.dir="), not null.
    node = text.empty() ? YAML::Load("''") : YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(source + ": " + path + ": invalid YAML value '" + text +
                                "': " + e.msg);
  }
  try {
    field->set(config, parse_scalar(node, *field));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
}

Config load_config(const std::string& path) {
  return load_config_with_overrides(path, {});
}

std::string find_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec) || fs::path(path).is_absolute()) return path;
  const fs::path preset = fs::path("configs") / path;
  if (fs::is_regular_file(preset, ec)) return preset.string();
  throw std::invalid_argument(path + ": cannot read config file (no such file here, nor " +
                              preset.string() + ")");
}

namespace {

// config, read from `source`, with the overrides applied, then `check`; its
// std::invalid_argument is prefixed with the source and whether overrides were applied.
Config with_overrides(Config config,
                      const std::string& source,
                      const std::vector<std::string>& overrides,
                      void (*check)(Config&)) {
  for (const auto& assignment : overrides) apply_override(config, assignment);
  try {
    check(config);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + (overrides.empty() ? "" : " with --set overrides") +
                                ": " + e.what());
  }
  return config;
}

}  // namespace

Config load_config_with_overrides(const std::string& given_path,
                                  const std::vector<std::string>& overrides) {
  const std::string path = find_config(given_path);
  return with_overrides(parse_config(read_file(path), path), path, overrides, validate);
}

Config read_config_with_overrides(const std::string& given_path,
                                  const std::vector<std::string>& overrides) {
  auto check = [](Config& c) { check_values(c); };
  if (given_path.empty()) return with_overrides(Config{}, "defaults", overrides, check);
  const std::string path = find_config(given_path);
  return with_overrides(parse_config(read_file(path), path), path, overrides, check);
}

}  // namespace combiner::config
