/*
 * A stand-in for NVIDIA's libnvidia-ml.so.1, for machines without a GPU (this project's CI).
 *
 * It exports the NVML entry points that nvidia-ml-py's telemetry calls use, with NVML's C signatures and
 * return codes, and answers from plain files instead of a driver: device i reads
 * $NVML_STANDIN_DIR/gpu<i>, one sample per line, "utilisation_percent memory_used_bytes power_milliwatts";
 * successive calls in one process walk through the lines (wrapping around), so a test knows exactly
 * which values a sampler can have seen. The number of devices is $NVML_STANDIN_COUNT. It stands in for
 * the driver only: nvidia-ml-py itself (the binding, its library loading by soname, its structures and
 * error handling) is the real one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_UNKNOWN 999
#define MAX_DEVICES 64

typedef struct { unsigned int gpu; unsigned int memory; } nvmlUtilization_t;
typedef struct { unsigned long long total; unsigned long long free; unsigned long long used; } nvmlMemory_t;
typedef void *nvmlDevice_t;

static int initialised = 0;
static unsigned int cursor[MAX_DEVICES];

static unsigned int device_count(void) {
    const char *count = getenv("NVML_STANDIN_COUNT");
    unsigned int n = count ? (unsigned int)strtoul(count, NULL, 10) : 0;
    return n > MAX_DEVICES ? MAX_DEVICES : n;
}

static unsigned int index_of(nvmlDevice_t device) { return (unsigned int)((uintptr_t)device - 1); }

/* the line of device i's file for this call (each metric call of one sample reads the same line) */
static int sample(unsigned int i, int advance, unsigned int *util, unsigned long long *used, unsigned int *power) {
    char path[4096];
    const char *dir = getenv("NVML_STANDIN_DIR");
    if (!dir || i >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(path, sizeof path, "%s/gpu%u", dir, i);
    FILE *file = fopen(path, "r");
    if (!file) return NVML_ERROR_NOT_FOUND;
    unsigned int lines = 0, u, p;
    unsigned long long m;
    unsigned int want = cursor[i];
    int found = 0;
    while (fscanf(file, "%u %llu %u", &u, &m, &p) == 3) {
        if (lines == want) { *util = u; *used = m; *power = p; found = 1; }
        lines++;
    }
    if (!found && lines > 0) {  /* wrap around */
        rewind(file);
        want = want % lines;
        for (unsigned int k = 0; k <= want && fscanf(file, "%u %llu %u", &u, &m, &p) == 3; k++) {
            *util = u; *used = m; *power = p;
        }
        cursor[i] = want;
        found = 1;
    }
    fclose(file);
    if (!found) return NVML_ERROR_UNKNOWN;
    if (advance) cursor[i]++;
    return NVML_SUCCESS;
}

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (!getenv("NVML_STANDIN_DIR")) return NVML_ERROR_UNKNOWN;
    initialised = 1;
    return NVML_SUCCESS;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { initialised = 0; return NVML_SUCCESS; }
const char *nvmlErrorString(int result) { return result == NVML_SUCCESS ? "Success" : "stand-in NVML error"; }

int nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    *count = device_count();
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)(uintptr_t)(index + 1);
    return NVML_SUCCESS;
}

/* a sample is utilisation, then memory, then power: the power call moves to the next line */
int nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    unsigned int u, p; unsigned long long m;
    int rc = sample(index_of(device), 0, &u, &m, &p);
    if (rc == NVML_SUCCESS) { utilization->gpu = u; utilization->memory = 0; }
    return rc;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    unsigned int u, p; unsigned long long m;
    int rc = sample(index_of(device), 0, &u, &m, &p);
    if (rc == NVML_SUCCESS) { memory->total = 80ULL << 30; memory->used = m; memory->free = memory->total - m; }
    return rc;
}

int nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    unsigned int u, p; unsigned long long m;
    int rc = sample(index_of(device), 1, &u, &m, &p);
    if (rc == NVML_SUCCESS) *power = p;
    return rc;
}

/* what the compute record asks: the model name ($NVML_STANDIN_NAME), driver and CUDA versions */
int nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    const char *value = getenv("NVML_STANDIN_NAME");
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (index_of(device) >= device_count() || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(name, length, "%s", value ? value : "Stand-in GPU");
    return NVML_SUCCESS;
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(version, length, "%s", "550.54.15");
    return NVML_SUCCESS;
}

int nvmlSystemGetCudaDriverVersion(int *version) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    *version = 12040;
    return NVML_SUCCESS;
}
int nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }
