// YAML run configs for every docmatch command, through CLI11's config hook.
//
// A config file has one section per command; keys are the command's long
// option names (dashes or underscores), values scalars or lists:
//   prepare:
//     input: data/wikispeedia/articles.jsonl
//     vocab-size: 16000
// Options given on the command line override the file. `--dump-config` prints
// the resolved configuration of the command being run in the same format, so
// a dumped config can be fed back with `--config`.
#pragma once

#include <CLI/CLI.hpp>

#include <istream>
#include <string>
#include <vector>

namespace docmatch::cli {

// Edits (insert, delete, substitute, swap neighbours) between a and b.
size_t EditDistance(const std::string& a, const std::string& b);
// The name of `names` nearest `word`, when at most `max_edits` away; else "".
std::string NearestName(const std::string& word, const std::vector<std::string>& names, size_t max_edits);

// Every key of the config file at `path` must name a command of `app` (a
// section) or a long option: of that command inside its section, of `app`
// at the top. Throws CLI::ConfigError naming the file, the line, the key
// and the nearest known name (CLI11 itself ignores unknown keys).
void CheckConfigKeys(const std::string& path, const CLI::App& app);

// `command`'s resolved options (given, from the config file, or defaults) as
// a config file with its one section, the way --dump-config prints them.
std::string CommandConfigYaml(const CLI::App& command);

class YamlConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
};

}  // namespace docmatch::cli
