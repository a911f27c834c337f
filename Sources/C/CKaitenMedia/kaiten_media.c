#include "kaiten_media.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <vips/vips.h>
#include <libavformat/avformat.h>
#include <libavcodec/avcodec.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>

static void fail(char *error, size_t size, const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(error, size, format, arguments);
    va_end(arguments);
}

// libvips keeps its errors in a global buffer: take the last line, then clear it.
static void fail_vips(char *error, size_t size, const char *what) {
    const char *buffer = vips_error_buffer();
    char last[512] = "";
    if (buffer && *buffer) {
        size_t length = strlen(buffer);
        while (length > 0 && buffer[length - 1] == '\n') length--;
        size_t start = length;
        while (start > 0 && buffer[start - 1] != '\n') start--;
        size_t n = length - start < sizeof(last) - 1 ? length - start : sizeof(last) - 1;
        memcpy(last, buffer + start, n);
        last[n] = 0;
    }
    vips_error_clear();
    fail(error, size, "%s%s%s", what, *last ? ": " : "", last);
}

int km_init(const char *argv0, char *error, size_t error_size) {
    if (VIPS_INIT(argv0)) {
        fail_vips(error, error_size, "libvips did not start");
        return -1;
    }
    // One process per job queue, one thread each: the caller runs as many as it has cores.
    vips_concurrency_set(1);
    vips_cache_set_max(0);
    vips_cache_set_max_mem(0);
    vips_cache_set_max_files(0);
    // Only the decoders a photo or a screenshot needs; ImageMagick, PDF, SVG and the rest of
    // what libvips can load stay blocked for files that come from other people's devices.
    vips_block_untrusted_set(TRUE);
    vips_operation_block_set("VipsForeignLoad", TRUE);
    static const char *allowed[] = {
        "VipsForeignLoadJpeg", "VipsForeignLoadPng", "VipsForeignLoadWebp",
        "VipsForeignLoadHeif", "VipsForeignLoadNsgif", "VipsForeignLoadTiff", NULL,
    };
    for (int i = 0; allowed[i]; i++) vips_operation_block_set(allowed[i], FALSE);
    av_log_set_level(AV_LOG_QUIET);
    return 0;
}

void km_free(void *pointer) { g_free(pointer); }

// Flattens transparency onto white, turns by `orientation`, encodes as JPEG.
static int encode(VipsImage *image, int orientation, void **out, size_t *out_length, int *width, int *height,
                  char *error, size_t error_size) {
    VipsImage *current = image;
    g_object_ref(current);
    if (vips_image_hasalpha(current)) {
        VipsImage *flat = NULL;
        VipsArrayDouble *white = vips_array_double_newv(1, 255.0);
        int failed = vips_flatten(current, &flat, "background", white, NULL);
        vips_area_unref(VIPS_AREA(white));
        g_object_unref(current);
        if (failed) {
            fail_vips(error, error_size, "cannot flatten its transparency");
            return -1;
        }
        current = flat;
    }
    if (orientation > 1 && orientation <= 8) {
        VipsImage *tagged = NULL, *turned = NULL;
        if (vips_copy(current, &tagged, NULL)) {
            g_object_unref(current);
            fail_vips(error, error_size, "cannot turn it");
            return -1;
        }
        g_object_unref(current);
        vips_image_set_int(tagged, VIPS_META_ORIENTATION, orientation);
        int failed = vips_autorot(tagged, &turned, NULL);
        g_object_unref(tagged);
        if (failed) {
            fail_vips(error, error_size, "cannot turn it");
            return -1;
        }
        current = turned;
    }
    if (vips_jpegsave_buffer(current, out, out_length, "Q", 80, "strip", TRUE, NULL)) {
        g_object_unref(current);
        fail_vips(error, error_size, "cannot make the thumbnail");
        return -1;
    }
    *width = vips_image_get_width(current);
    *height = vips_image_get_height(current);
    g_object_unref(current);
    return 0;
}

int km_image_date(const char *path, char *out, size_t out_size, char *error, size_t error_size) {
    VipsImage *header = vips_image_new_from_file(path, "access", VIPS_ACCESS_SEQUENTIAL, NULL);
    if (!header) {
        fail_vips(error, error_size, "not an image this decoder reads");
        return -1;
    }
    const char *value = NULL;
    int result = -1;
    // "2024:05:06 07:08:09 (2024:05:06 07:08:09, ASCII, 20 components, 20 bytes)"
    if (vips_image_get_typeof(header, "exif-ifd2-DateTimeOriginal") &&
        vips_image_get_string(header, "exif-ifd2-DateTimeOriginal", &value) == 0 && value && strlen(value) >= 19) {
        snprintf(out, out_size, "%.19s", value);
        result = 0;
    } else {
        vips_error_clear();
        fail(error, error_size, "no EXIF DateTimeOriginal");
    }
    g_object_unref(header);
    return result;
}

int km_image_thumbnail(const char *path, const void *data, size_t length, int size, long long max_pixels, int orientation,
                       void **out, size_t *out_length, int *width, int *height, char *error, size_t error_size) {
    if (!path && length == 0) {
        fail(error, error_size, "an empty file is not an image");
        return -1;
    }
    // The header first (nothing is decoded yet): its size decides whether to go on.
    VipsImage *header = path ? vips_image_new_from_file(path, "access", VIPS_ACCESS_SEQUENTIAL, NULL)
                             : vips_image_new_from_buffer(data, length, "", "access", VIPS_ACCESS_SEQUENTIAL, NULL);
    if (!header) {
        fail_vips(error, error_size, "not an image this decoder reads");
        return -1;
    }
    long long pixels = (long long)vips_image_get_width(header) * (long long)vips_image_get_height(header);
    // The loader's name points into the header's metadata: copied before the header is freed.
    const char *name = NULL;
    char loader[64] = "";
    if (vips_image_get_string(header, VIPS_META_LOADER, &name) == 0 && name) snprintf(loader, sizeof(loader), "%s", name);
    else vips_error_clear();
    long long limit = strncmp(loader, "jpegload", 8) == 0 ? max_pixels * 64 : max_pixels;
    g_object_unref(header);
    if (pixels > limit) {
        fail(error, error_size, "declares %.0f megapixels, over the limit of %.0f for %s", pixels / 1e6, limit / 1e6,
             *loader ? loader : "this format");
        return -1;
    }
    VipsImage *thumbnail = NULL;
    // A file cut short is an error, not a picture padded with grey.
    int failed = path ? vips_thumbnail(path, &thumbnail, size, "height", size, "size", VIPS_SIZE_DOWN, "fail_on", VIPS_FAIL_ON_TRUNCATED, NULL)
                      : vips_thumbnail_buffer((void *)data, length, &thumbnail, size, "height", size, "size", VIPS_SIZE_DOWN,
                                              "fail_on", VIPS_FAIL_ON_TRUNCATED, NULL);
    if (failed) {
        fail_vips(error, error_size, "cannot decode it");
        return -1;
    }
    int result = encode(thumbnail, orientation, out, out_length, width, height, error, error_size);
    g_object_unref(thumbnail);
    return result;
}

// What a video's container may make libavformat open. A peer chooses the bytes: an HLS playlist
// or an ffconcat list named .mp4 would otherwise be probed as such and open local files or other
// URLs, and their frame would land in a thumbnail cache that may itself be synced. Only the
// containers Kaiten thumbnails are probed, and only the protocols its inputs use (a local path,
// or the signed range server over http).
static void restrict_input(AVDictionary **options) {
    av_dict_set(options, "format_whitelist", "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,mpegts,mpeg,asf,flv,ogg", 0);
    av_dict_set(options, "protocol_whitelist", "file,http,tcp", 0);
}

// Opens a video with the restrictions above and the caller's options (taken and freed); says
// why when it cannot: 0, or -1 with `error` set.
static int open_restricted(const char *url, AVDictionary *options, AVFormatContext **format, char *error, size_t error_size) {
    restrict_input(&options);
    int status = avformat_open_input(format, url, NULL, &options);
    av_dict_free(&options);
    if (status < 0) {
        char reason[256];
        av_strerror(status, reason, sizeof(reason));
        fail(error, error_size, "not a video this decoder reads (%s)", reason);
        return -1;
    }
    return 0;
}

// The stream's display matrix as a clockwise turn of 0, 90, 180 or 270 degrees.
static int display_rotation(AVStream *stream) {
    size_t size = 0;
    const int32_t *matrix = (const int32_t *)av_stream_get_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (!matrix || size < 9 * sizeof(int32_t)) return 0;
    double degrees = -av_display_rotation_get(matrix);
    int turn = ((int)lround(degrees / 90.0) % 4 + 4) % 4;
    return turn * 90;
}

int km_video_thumbnail(const char *url, int size, long long max_pixels, double at_seconds, int timeout_seconds,
                       void **out, size_t *out_length, int *width, int *height, char *error, size_t error_size) {
    AVFormatContext *format = NULL;
    AVCodecContext *codec = NULL;
    AVPacket *packet = NULL;
    AVFrame *frame = NULL;
    struct SwsContext *scaler = NULL;
    uint8_t *rgb = NULL;
    VipsImage *image = NULL;
    int result = -1;
    char reason[256];

    AVDictionary *options = NULL;
    char timeout[32];
    snprintf(timeout, sizeof(timeout), "%lld", (long long)timeout_seconds * 1000000LL);
    av_dict_set(&options, "rw_timeout", timeout, 0);
    // What the container header needs, not 5 MB of probing: fewer bytes from the peers.
    av_dict_set(&options, "probesize", "1000000", 0);
    av_dict_set(&options, "analyzeduration", "1000000", 0);
    // A small socket buffer: what the server sends ahead of a seek is fetched for nothing.
    av_dict_set(&options, "recv_buffer_size", "32768", 0);
    if (open_restricted(url, options, &format, error, error_size) != 0) goto done;
    int status;
    if ((status = avformat_find_stream_info(format, NULL)) < 0) {
        av_strerror(status, reason, sizeof(reason));
        fail(error, error_size, "cannot read the streams (%s)", reason);
        goto done;
    }
    const AVCodec *decoder = NULL;
    int index = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
    if (index < 0 || !decoder) {
        fail(error, error_size, index == AVERROR_DECODER_NOT_FOUND ? "no decoder for its video stream" : "no video stream");
        goto done;
    }
    AVStream *stream = format->streams[index];
    if ((long long)stream->codecpar->width * stream->codecpar->height > max_pixels) {
        fail(error, error_size, "frames of %d × %d, over the limit of %.0f megapixels", stream->codecpar->width,
             stream->codecpar->height, max_pixels / 1e6);
        goto done;
    }
    codec = avcodec_alloc_context3(decoder);
    if (!codec || avcodec_parameters_to_context(codec, stream->codecpar) < 0) {
        fail(error, error_size, "cannot set up the decoder");
        goto done;
    }
    codec->thread_count = 1;
    if ((status = avcodec_open2(codec, decoder, NULL)) < 0) {
        av_strerror(status, reason, sizeof(reason));
        fail(error, error_size, "cannot open the decoder (%s)", reason);
        goto done;
    }
    if (at_seconds > 0 && format->duration != AV_NOPTS_VALUE && format->duration > (int64_t)(2 * at_seconds * AV_TIME_BASE)) {
        int64_t target = av_rescale_q((int64_t)(at_seconds * AV_TIME_BASE), AV_TIME_BASE_Q, stream->time_base);
        if (stream->start_time != AV_NOPTS_VALUE) target += stream->start_time;
        // A failed seek decodes from the start instead.
        av_seek_frame(format, index, target, AVSEEK_FLAG_BACKWARD);
    }
    packet = av_packet_alloc();
    frame = av_frame_alloc();
    int decoded = 0, packets = 0;
    while (!decoded && packets < 600) {
        status = av_read_frame(format, packet);
        if (status < 0) {
            avcodec_send_packet(codec, NULL);
            decoded = avcodec_receive_frame(codec, frame) == 0;
            break;
        }
        if (packet->stream_index == index) {
            packets++;
            if (avcodec_send_packet(codec, packet) == 0) decoded = avcodec_receive_frame(codec, frame) == 0;
        }
        av_packet_unref(packet);
    }
    if (!decoded) {
        fail(error, error_size, "no frame could be decoded");
        goto done;
    }
    double aspect = frame->sample_aspect_ratio.num > 0 && frame->sample_aspect_ratio.den > 0
                        ? (double)frame->sample_aspect_ratio.num / frame->sample_aspect_ratio.den : 1.0;
    double shown_width = frame->width * aspect, shown_height = frame->height;
    double scale = fmin(1.0, size / fmax(shown_width, shown_height));
    int target_width = (int)fmax(1, lround(shown_width * scale)), target_height = (int)fmax(1, lround(shown_height * scale));
    scaler = sws_getContext(frame->width, frame->height, frame->format, target_width, target_height, AV_PIX_FMT_RGB24,
                            SWS_AREA, NULL, NULL, NULL);
    if (!scaler) {
        fail(error, error_size, "cannot convert its frames (pixel format %d)", frame->format);
        goto done;
    }
    int stride = target_width * 3;
    rgb = av_malloc((size_t)stride * target_height);
    if (!rgb) {
        fail(error, error_size, "out of memory");
        goto done;
    }
    uint8_t *planes[4] = {rgb, NULL, NULL, NULL};
    int strides[4] = {stride, 0, 0, 0};
    sws_scale(scaler, (const uint8_t *const *)frame->data, frame->linesize, 0, frame->height, planes, strides);
    image = vips_image_new_from_memory_copy(rgb, (size_t)stride * target_height, target_width, target_height, 3, VIPS_FORMAT_UCHAR);
    if (!image) {
        fail_vips(error, error_size, "cannot hold the frame");
        goto done;
    }
    image->Type = VIPS_INTERPRETATION_sRGB;
    static const int orientation_for_turn[4] = {1, 6, 3, 8};
    result = encode(image, orientation_for_turn[display_rotation(stream) / 90], out, out_length, width, height, error, error_size);

done:
    if (image) g_object_unref(image);
    av_free(rgb);
    sws_freeContext(scaler);
    av_frame_free(&frame);
    av_packet_free(&packet);
    avcodec_free_context(&codec);
    avformat_close_input(&format);
    return result;
}

int km_video_creation_time(const char *url, char *out, size_t out_size, char *error, size_t error_size) {
    AVFormatContext *format = NULL;
    if (open_restricted(url, NULL, &format, error, error_size) != 0) return -1;
    const AVDictionaryEntry *entry = av_dict_get(format->metadata, "creation_time", NULL, 0);
    for (unsigned i = 0; !entry && i < format->nb_streams; i++) {
        entry = av_dict_get(format->streams[i]->metadata, "creation_time", NULL, 0);
    }
    int result = -1;
    if (entry && entry->value && *entry->value) {
        snprintf(out, out_size, "%s", entry->value);
        result = 0;
    } else {
        fail(error, error_size, "no creation time in the container");
    }
    avformat_close_input(&format);
    return result;
}
