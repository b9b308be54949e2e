// Translation unit that carries the precompiled <torch/torch.h> (see src/CMakeLists.txt).
