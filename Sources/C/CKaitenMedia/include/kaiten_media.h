// The media decoders Kaiten's helper process (kaiten-media) drives: libvips for images and
// libavformat/libavcodec for video frames. Plain C because libvips's API is variadic, which
// Swift cannot call; every function reports failure as a sentence in `error`.
#ifndef KAITEN_MEDIA_H
#define KAITEN_MEDIA_H

#include <stddef.h>

/// Starts libvips with the settings a thumbnailer of untrusted files wants: one worker thread,
/// no operation cache, and only the loaders for JPEG, PNG, WebP, HEIF, GIF and TIFF (the rest,
/// ImageMagick's among them, are blocked). Returns 0, or -1 with `error` set.
int km_init(const char *argv0, char *error, size_t error_size);

/// A JPEG thumbnail, neither side larger than `size`, of the image in the file at `path`, or
/// (when `path` is NULL) in `data`/`length`. Images declaring more than `max_pixels` pixels
/// are refused, except JPEGs, which are decoded shrunk (by up to 8) and may have 64 times as
/// many. `orientation` (EXIF 2-8) rotates the result, for an embedded thumbnail whose image
/// carried the tag; 0 or 1 leaves it as decoded (which already honours the image's own tag).
/// On success returns 0 and sets `out` (free with km_free), its length, width and height.
int km_image_thumbnail(const char *path, const void *data, size_t length, int size, long long max_pixels, int orientation,
                       void **out, size_t *out_length, int *width, int *height, char *error, size_t error_size);

/// A JPEG thumbnail of one frame of the video at `url` (a path or an http:// URL, read by
/// ranges): the key frame at or before `at_seconds` (0 when the video is shorter than twice
/// that), turned as the stream's display matrix says. Refuses frames over `max_pixels`.
/// `timeout_seconds` bounds every network read.
int km_video_thumbnail(const char *url, int size, long long max_pixels, double at_seconds, int timeout_seconds,
                       void **out, size_t *out_length, int *width, int *height, char *error, size_t error_size);

/// The container's creation time (QuickTime/MP4 `creation_time`, ISO 8601 UTC as ffmpeg reports
/// it) into `out`; 0 when found, -1 (with `error`) when the file has none or cannot be read.
int km_video_creation_time(const char *url, char *out, size_t out_size, char *error, size_t error_size);

/// An image's EXIF DateTimeOriginal (`YYYY:MM:DD HH:MM:SS`) as libvips reads it (JPEG, HEIF,
/// PNG, WebP, TIFF): 0, or -1 with `error` when it has none.
int km_image_date(const char *path, char *out, size_t out_size, char *error, size_t error_size);

void km_free(void *pointer);

#endif
