// `docmatch inspect` on model and run folders: what a checkpoint, best/, an
// import or an export holds (kind, size, tokenizer, step, the command that
// made it), and where a training run stands (checkpoints, best validation,
// first and last loss, throughput). JSON, like inspect's corpus summary.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace docmatch::cli {

// A folder with a docmatch config.json: a checkpoint, best/, import or export.
bool IsModelFolder(const std::string& path);
// A training run's folder: the run's `.lock`, its `latest` link or its
// metrics.jsonl (what every run writes; a config.yaml alone is too common a
// name to decide, since outputs.h refuses to write inside a run).
bool IsRunFolder(const std::string& path);

nlohmann::ordered_json DescribeModelFolder(const std::string& folder);
nlohmann::ordered_json DescribeRun(const std::string& run);

}  // namespace docmatch::cli
