// Text from outside (a path, an id, a line of a user's file) made safe to
// print on a terminal inside an error: valid UTF-8 passes, and a control
// character (but newline and tab) or a byte that is not UTF-8 is written as
// \xNN, so a message cannot move the cursor, recolour the terminal or print
// raw binary.
#pragma once

#include <string>

namespace docmatch::console {

std::string Printable(const std::string& text);

}  // namespace docmatch::console
