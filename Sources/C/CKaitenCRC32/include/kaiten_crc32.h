#ifndef KAITEN_CRC32_H
#define KAITEN_CRC32_H

#include <stddef.h>
#include <stdint.h>

/// zlib's crc32() (CRC-32, the IEEE polynomial, same seed and result), faster on x86-64 with
/// carry-less multiplication: every index log record and scan cache is checked with it.
uint32_t kaiten_crc32(uint32_t crc, const void *buf, size_t len);

/// The same through zlib alone (tests compare the two).
uint32_t kaiten_crc32_zlib(uint32_t crc, const void *buf, size_t len);

#endif
