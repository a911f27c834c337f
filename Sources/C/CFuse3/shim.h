// libfuse 3's high-level API at version 3.1: fuse_loop_mt_31 is a plain function there (the
// later versions are macros, which Swift cannot call).
#define FUSE_USE_VERSION 31
#include <fuse.h>
