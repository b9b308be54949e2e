// The YAML side of CLI11's config hook: a command's section of the file becomes
// its long options, and --dump-config writes the resolved ones back as YAML.
#include "cli/yaml_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <map>

#include "model/config.h"

namespace docmatch::cli {
namespace {

std::string OptionKey(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

void EmitApp(const CLI::App* app, bool default_also, YAML::Emitter* out) {
  for (const CLI::Option* option : app->get_options()) {
    const std::string name = option->get_single_name();
    if (option->get_lnames().empty() || !option->get_configurable() || name == "help" || name == "config" ||
        name == "dump-config") {
      continue;
    }
    std::vector<std::string> values = option->results();
    if (values.empty() && default_also) {
      const std::string fallback = option->get_default_str();
      if (fallback.empty()) continue;
      values = {fallback};
    }
    if (values.empty()) continue;
    *out << YAML::Key << name << YAML::Value;
    if (option->get_items_expected_max() > 1 && values.size() != 1) {
      *out << YAML::Flow << values;
    } else if (option->get_type_size() == 0) {  // a flag
      *out << (values.front() == "true" || values.front() == "1" || values.front().empty());
    } else {
      *out << values.front();
    }
  }
  for (const CLI::App* sub : app->get_subcommands()) {
    *out << YAML::Key << sub->get_name() << YAML::Value << YAML::BeginMap;
    EmitApp(sub, default_also, out);
    *out << YAML::EndMap;
  }
}

// The long option names `app` accepts in a config file.
std::vector<std::string> ConfigurableNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    if (!option->get_configurable()) continue;
    for (const std::string& name : option->get_lnames()) {
      if (name != "help" && name != "config") names.push_back(name);
    }
  }
  return names;
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string NearestName(const std::string& word, const std::vector<std::string>& names, size_t max_edits) {
  std::string nearest;
  size_t best = max_edits + 1;
  for (const std::string& name : names) {
    const size_t distance = EditDistance(word, name);
    if (distance < best) best = distance, nearest = name;
  }
  return nearest;
}

void CheckConfigKeys(const std::string& path, const CLI::App& app) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw CLI::ConfigError(path + ": not valid YAML: " + e.what());
  }
  try {
    model::CheckUniqueKeys(root, path);
  } catch (const std::runtime_error& e) {
    throw CLI::ConfigError(e.what());
  }
  if (!root || root.IsNull() || !root.IsMap()) return;  // from_config reports a file that is not a map
  auto unknown = [&](const YAML::Node& key, const std::string& what, const std::vector<std::string>& names,
                     const std::string& listing) {
    // Names other trainers use for docmatch's options.
    static const std::map<std::string, std::string> kSynonyms = {
        {"learning-rate", "lr"}, {"warmup", "warmup-steps"}, {"max-steps", "steps"},         {"num-steps", "steps"},
        {"batch", "batch-size"}, {"output-dir", "run"},      {"precision-mode", "precision"}};
    const std::string word = OptionKey(key.as<std::string>());
    const auto synonym = kSynonyms.find(word);
    std::string nearest = NearestName(word, names, std::max<size_t>(2, word.size() / 4));
    if (synonym != kSynonyms.end() && std::find(names.begin(), names.end(), synonym->second) != names.end())
      nearest = synonym->second;
    throw CLI::ConfigError(path + ":" + std::to_string(key.Mark().line + 1) + ": unknown " + what + " '" +
                           key.as<std::string>() + "'" + (nearest.empty() ? "" : "; did you mean '" + nearest + "'?") +
                           " (" + listing + ")");
  };
  std::vector<std::string> sections;
  for (const CLI::App* sub : app.get_subcommands({})) sections.push_back(sub->get_name());
  const std::vector<std::string> top_options = ConfigurableNames(app);
  for (const auto& entry : root) {
    const std::string key = OptionKey(entry.first.as<std::string>());
    if (std::find(top_options.begin(), top_options.end(), key) != top_options.end()) continue;
    if (key == "model") {
      // A model YAML (configs/models/) given where a command's config goes.
      throw CLI::ConfigError(path + ":" + std::to_string(entry.first.Mark().line + 1) +
                             ": a `model:` section: this is a model YAML, which --model-config reads (pretrain, "
                             "finetune); --config takes a file of command sections (configs/*.yaml)");
    }
    if (std::find(sections.begin(), sections.end(), key) == sections.end()) {
      std::vector<std::string> known = sections;
      known.insert(known.end(), top_options.begin(), top_options.end());
      unknown(entry.first, "section", known, "sections are commands: " + Join(sections));
    }
    if (entry.second.IsNull()) continue;
    if (!entry.second.IsMap()) {
      throw CLI::ConfigError(path + ":" + std::to_string(entry.first.Mark().line + 1) + ": section '" + key +
                             "' must hold the command's options as `option: value` lines");
    }
    const CLI::App* command = app.get_subcommand(key);
    const std::vector<std::string> options = ConfigurableNames(*command);
    for (const auto& option : entry.second) {
      const std::string name = OptionKey(option.first.as<std::string>());
      if (std::find(options.begin(), options.end(), name) == options.end()) {
        unknown(option.first, "option of " + key, options, "docmatch " + key + " --help lists them");
      }
      if (option.second.IsMap()) {
        throw CLI::ConfigError(path + ":" + std::to_string(option.first.Mark().line + 1) + ": '" + name +
                               "' in section '" + key + "' takes a value or a list, not a map");
      }
    }
  }
}

std::string CommandConfigYaml(const CLI::App& command) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << command.get_name() << YAML::Value << YAML::BeginMap;
  EmitApp(&command, /*default_also=*/true, &out);
  out << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string YamlConfig::to_config(const CLI::App* app, bool default_also, bool, std::string) const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  EmitApp(app, default_also, &out);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<CLI::ConfigItem> YamlConfig::from_config(std::istream& input) const {
  YAML::Node root;
  try {
    root = YAML::Load(input);
  } catch (const YAML::Exception& e) {
    throw CLI::ParseError("config file is not valid YAML: " + std::string(e.what()), CLI::ExitCodes::ConfigError);
  }
  std::vector<CLI::ConfigItem> items;
  if (!root || root.IsNull()) return items;
  if (!root.IsMap())
    throw CLI::ParseError("config file must be a YAML map of command sections", CLI::ExitCodes::ConfigError);
  std::function<void(const YAML::Node&, std::vector<std::string>)> walk = [&](const YAML::Node& node,
                                                                              std::vector<std::string> parents) {
    for (const auto& entry : node) {
      const std::string key = OptionKey(entry.first.as<std::string>());
      const YAML::Node& value = entry.second;
      if (value.IsMap()) {
        std::vector<std::string> nested = parents;
        nested.push_back(key);
        walk(value, nested);
        continue;
      }
      CLI::ConfigItem item;
      item.parents = parents;
      item.name = key;
      if (value.IsSequence()) {
        for (const auto& element : value) item.inputs.push_back(element.as<std::string>());
      } else if (!value.IsNull()) {
        item.inputs.push_back(value.as<std::string>());
      }
      items.push_back(std::move(item));
    }
  };
  walk(root, {});
  return items;
}

}  // namespace docmatch::cli
