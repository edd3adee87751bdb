/* The Kafka listener's per-record loops in C: records.py's produce walk (`_kaska_records`) and
 * fetch re-framing (`_kafka_records`), which cost ~2.5 us a record in CPython and were the
 * produce path's bottleneck (the connection thread spent ~80 % of its time there, py-spy).
 *
 * Same contract as the Python reference in records.py, which stays as the fallback and as the
 * oracle of tests/unit/broker/kafka/test_record_walk_native.py (byte-equal output, the same
 * accept/refuse verdict on any input): every read is bounds-checked against the record (or the
 * batch) it belongs to; a varint is at most 10 bytes and must fit 64 bits; a refusal raises
 * ValueError with the reason, which records.py turns into CorruptBatchError.
 *
 * Thread-safety: pure functions over a read-only buffer; the GIL is held throughout (the
 * output object is built as it goes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define VARINT_BYTES_MAX 10
#define NULL_LENGTH (-1)

/* Zigzag varint at buf[*pos], not past `end`. 0 on success, -1 with the Python error set. */
static int read_varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    uint64_t raw = 0;
    Py_ssize_t at = *pos;
    for (int i = 0; i < VARINT_BYTES_MAX; i++) {
        if (at >= end) {
            PyErr_SetString(PyExc_ValueError, "varint runs past the end of the record");
            return -1;
        }
        uint8_t byte = buf[at++];
        if (i == VARINT_BYTES_MAX - 1 && byte > 1) {
            if (byte & 0x80) break;
            PyErr_SetString(PyExc_ValueError, "varint exceeds 64 bits");
            return -1;
        }
        raw |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pos = at;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "varint longer than %d bytes", VARINT_BYTES_MAX);
    return -1;
}

/* Skip one varint-length-prefixed field (-1: null) inside [*pos, end). */
static int skip_field(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end) {
    int64_t length;
    if (read_varint(buf, pos, end, &length) < 0) return -1;
    if (length < NULL_LENGTH) {
        PyErr_Format(PyExc_ValueError, "negative field length %lld in a Kafka record",
                     (long long)length);
        return -1;
    }
    if (length > 0) {
        if (length > end - *pos) {
            PyErr_SetString(PyExc_ValueError, "a Kafka record field runs past the record");
            return -1;
        }
        *pos += (Py_ssize_t)length;
    }
    return 0;
}

/* Walk one record body [start, end) whole; its timestamp delta into *timestamp_delta. */
static int check_record(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end,
                        int64_t expected_offset_delta, int64_t *timestamp_delta) {
    Py_ssize_t pos = start + 1; /* attributes */
    int64_t offset_delta, header_count;
    if (end - start < 1) {
        PyErr_SetString(PyExc_ValueError, "empty Kafka record");
        return -1;
    }
    if (read_varint(buf, &pos, end, timestamp_delta) < 0) return -1;
    if (read_varint(buf, &pos, end, &offset_delta) < 0) return -1;
    if (offset_delta != expected_offset_delta) {
        PyErr_Format(PyExc_ValueError, "record offset delta %lld, expected %lld",
                     (long long)offset_delta, (long long)expected_offset_delta);
        return -1;
    }
    if (skip_field(buf, &pos, end) < 0 || skip_field(buf, &pos, end) < 0) return -1;
    if (read_varint(buf, &pos, end, &header_count) < 0) return -1;
    if (header_count < 0) {
        PyErr_Format(PyExc_ValueError, "negative header count %lld", (long long)header_count);
        return -1;
    }
    for (uint64_t i = 0; i < 2 * (uint64_t)header_count; i++) {
        if (skip_field(buf, &pos, end) < 0) return -1;
    }
    if (pos != end) {
        PyErr_Format(PyExc_ValueError, "a Kafka record's fields end at byte %zd, the record at %zd",
                     pos - start, end - start);
        return -1;
    }
    return 0;
}

/* kaska_records(buffer, start, count) -> bytes: the `count` Kafka records from buffer[start:]
 * (varint length | body, each walked whole), as Kaska records (u32 big-endian length | body). */
static PyObject *kaska_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, count;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &count)) return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t end = view.len;
    PyObject *out = NULL;
    if (start < 0 || start > end || count < 0) {
        PyErr_SetString(PyExc_ValueError, "start or count out of range");
        goto done;
    }
    /* Each record grows by at most 3 bytes (a >= 1-byte varint becomes 4 bytes) and takes at
     * least 2 of the input (length and attributes), so this bound never needs a resize. */
    Py_ssize_t cap = (end - start) + 3 * (count < end ? count : end);
    out = PyBytes_FromStringAndSize(NULL, cap);
    if (out == NULL) goto done;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
    Py_ssize_t written = 0, pos = start;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, timestamp_delta;
        if (read_varint(buf, &pos, end, &length) < 0) goto fail;
        if (length < 0 || length > end - pos) {
            PyErr_Format(PyExc_ValueError, "record %zd of length %lld runs past the batch", index,
                         (long long)length);
            goto fail;
        }
        if (check_record(buf, pos, pos + (Py_ssize_t)length, index, &timestamp_delta) < 0)
            goto fail;
        if (written + 4 + length > cap) { /* cannot happen (the bound above); checked anyway */
            PyErr_SetString(PyExc_ValueError, "record output bound exceeded");
            goto fail;
        }
        dst[written] = (uint8_t)(length >> 24);
        dst[written + 1] = (uint8_t)(length >> 16);
        dst[written + 2] = (uint8_t)(length >> 8);
        dst[written + 3] = (uint8_t)length;
        memcpy(dst + written + 4, buf + pos, (size_t)length);
        written += 4 + (Py_ssize_t)length;
        pos += (Py_ssize_t)length;
    }
    if (pos != end) {
        PyErr_Format(PyExc_ValueError, "%zd bytes after the last record", end - pos);
        goto fail;
    }
    if (_PyBytes_Resize(&out, written) < 0) out = NULL;
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyBuffer_Release(&view);
    return out;
}

static Py_ssize_t varint_size(uint64_t raw) {
    Py_ssize_t size = 1;
    while (raw > 0x7F) {
        raw >>= 7;
        size++;
    }
    return size;
}

static Py_ssize_t put_varint(uint8_t *dst, int64_t value) {
    uint64_t raw = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 0;
    while (raw > 0x7F) {
        dst[n++] = (uint8_t)((raw & 0x7F) | 0x80);
        raw >>= 7;
    }
    dst[n++] = (uint8_t)raw;
    return n;
}

/* kafka_records(buffer, start, end, count, kafka_bodies) -> (bytes, max timestamp delta): the
 * `count` Kaska records in buffer[start:end] (u32 length | record) as Kafka records (varint
 * length | body). kafka_bodies: the records are Kafka record bodies (stored verbatim; their
 * timestamp deltas give the maximum); else each is a value, framed as a record with timestamp
 * delta 0, offset delta = its index, a null key and no headers. */
static PyObject *kafka_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, stop, count;
    int kafka_bodies;
    if (!PyArg_ParseTuple(args, "y*nnnp", &view, &start, &stop, &count, &kafka_bodies))
        return NULL;
    const uint8_t *buf = view.buf;
    PyObject *out = NULL, *result = NULL;
    int64_t max_delta = 0;
    if (start < 0 || stop > view.len || start > stop || count < 0) {
        PyErr_SetString(PyExc_ValueError, "start, end or count out of range");
        goto done;
    }
    /* Pass 1: bounds and the output size. */
    Py_ssize_t size = 0, pos = start;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (stop - pos < 4) {
            PyErr_SetString(PyExc_ValueError, "record length runs past the batch");
            goto done;
        }
        uint32_t length = ((uint32_t)buf[pos] << 24) | ((uint32_t)buf[pos + 1] << 16) |
                          ((uint32_t)buf[pos + 2] << 8) | (uint32_t)buf[pos + 3];
        pos += 4;
        if ((Py_ssize_t)length > stop - pos) {
            PyErr_SetString(PyExc_ValueError, "record runs past the batch");
            goto done;
        }
        Py_ssize_t body;
        if (kafka_bodies) {
            Py_ssize_t at = pos + 1;
            int64_t delta;
            if (length < 1) {
                PyErr_SetString(PyExc_ValueError, "empty Kafka record");
                goto done;
            }
            int64_t offset_delta; /* read as records.py's read_prefix does: it must be there */
            if (read_varint(buf, &at, pos + length, &delta) < 0) goto done;
            if (read_varint(buf, &at, pos + length, &offset_delta) < 0) goto done;
            if (delta > max_delta) max_delta = delta;
            body = length;
        } else {
            /* attributes, timestamp delta 0, offset delta, key -1, value length, value, 0 headers */
            body = 1 + 1 + varint_size(((uint64_t)index << 1)) + 1 +
                   varint_size((uint64_t)length << 1) + length + 1;
        }
        size += varint_size((uint64_t)body << 1) + body;
        pos += length;
    }
    out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) goto done;
    /* Pass 2: write. */
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
    Py_ssize_t written = 0;
    pos = start;
    for (Py_ssize_t index = 0; index < count; index++) {
        uint32_t length = ((uint32_t)buf[pos] << 24) | ((uint32_t)buf[pos + 1] << 16) |
                          ((uint32_t)buf[pos + 2] << 8) | (uint32_t)buf[pos + 3];
        pos += 4;
        if (kafka_bodies) {
            written += put_varint(dst + written, length);
            memcpy(dst + written, buf + pos, length);
            written += length;
        } else {
            Py_ssize_t body = 1 + 1 + varint_size(((uint64_t)index << 1)) + 1 +
                              varint_size((uint64_t)length << 1) + length + 1;
            written += put_varint(dst + written, body);
            dst[written++] = 0;                                   /* attributes */
            dst[written++] = 0;                                   /* timestamp delta */
            written += put_varint(dst + written, index);          /* offset delta */
            dst[written++] = 1;                                   /* key length -1 */
            written += put_varint(dst + written, length);         /* value length */
            memcpy(dst + written, buf + pos, length);
            written += length;
            dst[written++] = 0;                                   /* header count */
        }
        pos += length;
    }
    if (written != size) {
        PyErr_SetString(PyExc_ValueError, "record output size mismatch");
        Py_CLEAR(out);
        goto done;
    }
    result = Py_BuildValue("(NL)", out, (long long)max_delta);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"kaska_records", kaska_records, METH_VARARGS,
     "kaska_records(buffer, start, count) -> bytes: Kafka records walked and re-framed."},
    {"kafka_records", kafka_records, METH_VARARGS,
     "kafka_records(buffer, start, end, count, kafka_bodies) -> (bytes, max timestamp delta)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_walk", "records.py's per-record loops in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_walk(void) { return PyModule_Create(&module); }
