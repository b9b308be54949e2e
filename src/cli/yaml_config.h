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

class YamlConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
};

}  // namespace docmatch::cli
