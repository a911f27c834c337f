#include <lz4.h>
