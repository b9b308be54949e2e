// The YAML side of CLI11's config hook: a command's section of the file becomes
// its long options, and --dump-config writes the resolved ones back as YAML.
#include "cli/yaml_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>

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

}  // namespace

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
