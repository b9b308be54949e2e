// The list of model kinds (kinds.h); each row is defined in its kind's file.
#include "model/kinds.h"

#include <stdexcept>

#include "model/config.h"

namespace docmatch::model {

const std::vector<const ModelKind*>& ModelKinds() {
  static const std::vector<const ModelKind*> kinds = {&SmithKind(), &MatchBertKind(), &SdrKind(), &SmashKind(),
                                                      &BagKind()};
  return kinds;
}

std::string ModelKindNames() {
  std::string names;
  const std::vector<const ModelKind*>& kinds = ModelKinds();
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (i > 0) names += i + 1 == kinds.size() ? " or " : ", ";
    names += kinds[i]->name;
  }
  return names;
}

const ModelKind& FindModelKind(const std::string& name, const std::string& origin) {
  for (const ModelKind* kind : ModelKinds()) {
    if (name == kind->name) return *kind;
  }
  throw std::invalid_argument(origin + ": model kind '" + name + "' is not one of " + ModelKindNames());
}

}  // namespace docmatch::model
