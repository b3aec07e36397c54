/*
 * tboard.h - a minimal TensorBoard event-file writer: scalars only, which is
 * all Megatron's training loop logs (loss, learning rate, loss scale, grad
 * norm, ...). No protobuf library: the three messages involved are encoded
 * by hand.
 *
 * The file is a TFRecord stream of tensorflow.Event messages. Its first
 * record carries file_version "brain.Event:2"; each scalar is one Event
 * {wall_time, step, summary {value {tag, simple_value (float32)}}}. Each
 * record is framed as: uint64 length, masked CRC32C of those 8 bytes, the
 * data, masked CRC32C of the data (all little-endian).
 *
 * The file is named like TensorBoard's own writer names it,
 * events.out.tfevents.<unix seconds, 10 digits>.<hostname>.<pid>.<k>, with k
 * counting up from 0 past any name already taken, so two writers in one
 * directory never share a file.
 */
#ifndef MEGAC_TRAIN_TBOARD_H
#define MEGAC_TRAIN_TBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct tboard {
	FILE *fp;
	char *path;     /* the event file */
	int failed;     /* a write failed: later calls refuse at once */
	struct tboard *mirror; /* another writer every scalar and flush also goes to
				* (the W&B folder beside --tensorboard-dir), or NULL;
				* closed by its owner */
};

/* Create dir (and parents) if needed and start a new event file there.
 * error() and -1 on failure (w is then closed). */
int tboard_open(struct tboard *w, const char *dir);

/* Append a scalar at step, stamped with the current wall-clock time.
 * The value is stored as float32, as TensorBoard's simple_value is. */
int tboard_add_scalar(struct tboard *w, const char *tag, int64_t step, double value);
/* The same with an explicit wall time (seconds since the epoch). */
int tboard_add_scalar_at(struct tboard *w, const char *tag, int64_t step, double value,
			 double wall_time);

/* Push buffered records to the file (fflush). error() and -1 on failure. */
int tboard_flush(struct tboard *w);
/* Flush, close and free; safe on a closed or zeroed writer. error() and -1
 * when the last writes failed. */
int tboard_close(struct tboard *w);

/* CRC-32C (Castagnoli), as TFRecord uses: crc32c_update(0, data, n) is the
 * checksum of data; feeding the bytes in pieces gives the same value. */
uint32_t tboard_crc32c_update(uint32_t crc, const void *data, size_t n);
uint32_t tboard_crc32c(const void *data, size_t n);
/* TFRecord's masked form of a CRC (stored CRCs are masked so that a CRC of
 * data that itself holds CRCs is not degenerate). */
uint32_t tboard_masked_crc32c(const void *data, size_t n);

#endif
