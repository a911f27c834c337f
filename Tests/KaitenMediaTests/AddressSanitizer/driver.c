// Drives kaiten-media's C (compiled with it under AddressSanitizer by MediaTests) on files a
// peer could send: first a PNG whose header declares 30000 x 30000 pixels (made here with
// zlib), refused by the pixel limit, then every path given on the command line. Prints each
// result; AddressSanitizer ends the process with a report at the first bad access.
#include "kaiten_media.h"

#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

static void put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static void chunk(FILE *f, const char *type, const unsigned char *data, uint32_t length) {
    unsigned char header[8];
    put32(header, length);
    memcpy(header + 4, type, 4);
    fwrite(header, 1, 8, f);
    if (length) fwrite(data, 1, length, f);
    uLong crc = crc32(0L, (const Bytef *)type, 4);
    if (length) crc = crc32(crc, data, length);
    unsigned char sum[4];
    put32(sum, (uint32_t)crc);
    fwrite(sum, 1, 4, f);
}

static int write_huge_png(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    fwrite(signature, 1, 8, f);
    unsigned char ihdr[13];
    put32(ihdr, 30000);
    put32(ihdr + 4, 30000);
    ihdr[8] = 8;   // bit depth
    ihdr[9] = 0;   // greyscale
    ihdr[10] = ihdr[11] = ihdr[12] = 0;
    chunk(f, "IHDR", ihdr, 13);
    // The first rows only: the header alone must decide.
    static unsigned char rows[4 * 30001];
    unsigned char packed[8192];
    uLongf packed_length = sizeof(packed);
    if (compress2(packed, &packed_length, rows, sizeof(rows), 9) != Z_OK) return -1;
    chunk(f, "IDAT", packed, (uint32_t)packed_length);
    chunk(f, "IEND", NULL, 0);
    return fclose(f);
}

static int thumbnail(const char *path) {
    char error[512] = "";
    void *out = NULL;
    size_t length = 0;
    int width = 0, height = 0;
    int result = km_image_thumbnail(path, NULL, 0, 255, 64000000LL, 0, &out, &length, &width, &height, error, sizeof(error));
    if (result == 0) {
        printf("%s: %d x %d\n", path, width, height);
        km_free(out);
    } else {
        printf("%s: %s\n", path, error);
    }
    return result;
}

int main(int argc, char **argv) {
    char error[512] = "";
    if (argc < 2 || km_init(argv[0], error, sizeof(error)) != 0) {
        fprintf(stderr, "usage: driver SCRATCH-DIR [IMAGE...] (%s)\n", error);
        return 2;
    }
    char huge[4096];
    snprintf(huge, sizeof(huge), "%s/huge.png", argv[1]);
    if (write_huge_png(huge) != 0) {
        fprintf(stderr, "cannot write %s\n", huge);
        return 2;
    }
    if (thumbnail(huge) == 0) {
        fprintf(stderr, "a 900-megapixel PNG was not refused\n");
        return 1;
    }
    for (int i = 2; i < argc; i++) thumbnail(argv[i]);
    return 0;
}
