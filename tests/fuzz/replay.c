/* SPDX-License-Identifier: MIT */
/* Replays fuzz corpora through the fuzz target without libFuzzer, for the normal test run:
 * replay DIR... prints TAP, one line per file. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
        int n = 0;
        for (int i = 1; i < argc; i++) {
                DIR *d = opendir(argv[i]);
                if (!d) {
                        printf("not ok %d - cannot open %s\n", ++n, argv[i]);
                        continue;
                }
                for (struct dirent *de; (de = readdir(d));) {
                        if (de->d_name[0] == '.')
                                continue;
                        char path[4096];
                        snprintf(path, sizeof path, "%s/%s", argv[i], de->d_name);
                        FILE *f = fopen(path, "rb");
                        if (!f)
                                continue;
                        static uint8_t buf[1 << 20];
                        size_t len = fread(buf, 1, sizeof buf, f);
                        fclose(f);
                        LLVMFuzzerTestOneInput(buf, len); /* aborts on a failed invariant */
                        printf("ok %d - %s\n", ++n, de->d_name);
                }
                closedir(d);
        }
        printf("1..%d\n", n);
        return n > 0 ? 0 : 1;
}
