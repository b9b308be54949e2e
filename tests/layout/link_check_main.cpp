// An empty program: tests/layout/CMakeLists.txt links each docmatch library
// into it whole (every object file), against only the folders its
// CMakeLists.txt names, so a call into an undeclared folder fails to link.
int main() { return 0; }
