// Only what docmatch wrote is ever removed. --fresh, --overwrite and every
// clean-up (a checkpoint pruned or replaced, a staged folder left by a crash)
// remove a path only when it carries docmatch's own record for what it is
// meant to be:
//
//   a checkpoint (step-N/)        trainer.json (checksums.json is not
//                                 required: older checkpoints lack it)
//   a model folder (best/, an export or import-hf output)
//                                 a config.json with "format":
//                                 "docmatch-model"
//   a staged folder (X.tmp/, best.old/)
//                                 empty, docmatch's staging mark
//                                 (files::kStagingMark), a checksums.json,
//                                 a trainer.json or docmatch's config.json
//   latest, latest.tmp            a symbolic link
//
// Anything else is refused with a sentence naming the path and what it
// lacks, before anything is removed, so that a user's folder that happens to
// sit where docmatch writes (a `best/` of their own, a `step-7/` of notes)
// is never deleted. This file is the one place that decides it.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace docmatch::io {

enum class Output {
  kCheckpoint,   // step-N/
  kModelFolder,  // best/, export and import-hf outputs
  kStaged,       // X.tmp/, best.old/
  kLink,         // latest
};

// What `path` lacks to be docmatch's `output` ("has no trainer.json"), or ""
// when it is docmatch's or does not exist.
std::string NotDocmatchs(const std::string& path, Output output);

// Throws as RemoveOwnOutputs does when one of `paths` is not docmatch's.
void CheckOwnOutputs(const std::vector<std::pair<std::string, Output>>& paths, const std::string& why,
                     const std::string& advice);

// Removes every path (those absent are skipped) once all are found to be
// docmatch's; otherwise removes nothing and throws std::runtime_error:
// "<why>: '<path>' <what it lacks>, so it is not docmatch's <output> and is
// kept; <advice>". Returns how many were removed.
size_t RemoveOwnOutputs(const std::vector<std::pair<std::string, Output>>& paths, const std::string& why,
                        const std::string& advice);

// Writes the model folder `output` through `write` (files::WriteFolder: a
// staged folder renamed into place), replacing one there (docmatch's: the
// caller checks) while keeping what a user added to it: the old folder is set
// aside as <output>.replaced, the new one moved into place, then each entry
// of the old one that docmatch did not write (not in its checksums.json, not
// that record, not a module folder its modules.json names) and the new one
// lacks is moved in, and only then is the old folder removed. A failure
// before the new folder is in place puts the old one back; a crash leaves
// <output>.replaced whole, and the next write refuses to run until the user
// has looked at it. Returns the names kept.
std::vector<std::string> ReplaceModelFolder(const std::string& output,
                                            const std::function<void(const std::string& staged)>& write,
                                            const std::string& stage);

}  // namespace docmatch::io
