/* A fuzz target without libFuzzer: runs LLVMFuzzerTestOneInput once on each
 * file named, and on each file of each directory named (in name order), from
 * an exact-size heap copy. ctest replays fuzz/corpus and fuzz/regressions this
 * way in every build (the sanitizer build included), fuzzing or not.
 * Arguments starting with '-' are libFuzzer's (-runs=0 ...) and ignored. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

static const char *current; /* the input running now, for the crash message */

static void on_fatal(int sig)
{
    static const char msg[] = "fuzz replay: crashed on input ";
    ssize_t rc = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    if (current != NULL)
        rc = write(STDERR_FILENO, current, strlen(current));
    rc = write(STDERR_FILENO, "\n", 1);
    (void)rc;
    signal(sig, SIG_DFL);
    raise(sig);
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "fuzz replay: %s: cannot open\n", path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf != NULL && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            uint8_t *bigger = realloc(buf, cap);
            if (bigger == NULL)
                free(buf);
            buf = bigger;
        }
    }
    fclose(f);
    if (buf == NULL) {
        fprintf(stderr, "fuzz replay: %s: out of memory\n", path);
        return -1;
    }
    uint8_t *exact = malloc(len ? len : 1);
    if (exact == NULL) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    current = path;
    LLVMFuzzerTestOneInput(exact, len);
    current = NULL;
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
    size_t inputs = 0;
    int failed = 0;

    signal(SIGABRT, on_fatal);
    signal(SIGSEGV, on_fatal);
    signal(SIGBUS, on_fatal);
    signal(SIGFPE, on_fatal);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (argv[i][0] == '-')
            continue;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz replay: %s: no such file or directory\n", argv[i]);
            failed = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            failed |= run_file(argv[i]) != 0;
            inputs++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, by_name);
        if (n < 0) {
            fprintf(stderr, "fuzz replay: %s: cannot list\n", argv[i]);
            failed = 1;
            continue;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            if (names[k]->d_name[0] == '.') { /* ., .., .gitkeep */
                free(names[k]);
                continue;
            }
            snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                failed |= run_file(path) != 0;
                inputs++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("fuzz replay: %s: %zu inputs%s\n", argv[0], inputs, failed ? ", some unreadable" : "");
    return failed;
}
