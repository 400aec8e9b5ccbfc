/* The one place the plugin reads sysfs, relative to RAILNET_FSROOT. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "railnet/sysfs.h"

static const char *rn_sysfs_root(void) {
  const char *r = getenv("RAILNET_FSROOT");
  return (r != NULL && *r != '\0') ? r : "";
}

int rn_sysfs_read(const char *path, char *buf, size_t len) {
  char full[PATH_MAX];
  snprintf(full, sizeof(full), "%s%s", rn_sysfs_root(), path);
  FILE *f = fopen(full, "re");
  if (f == NULL) return -1;
  char *ok = fgets(buf, (int)len, f);
  fclose(f);
  if (ok == NULL) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

int rn_sysfs_realpath(const char *path, char *buf, size_t len) {
  char full[PATH_MAX], res[PATH_MAX];
  const char *root = rn_sysfs_root();
  snprintf(full, sizeof(full), "%s%s", root, path);
  if (realpath(full, res) == NULL) return -1;
  size_t rl = strlen(root);
  const char *rel = (rl > 0 && strncmp(res, root, rl) == 0) ? res + rl : res;
  if ((size_t)snprintf(buf, len, "%s", rel) >= len) return -1;
  return 0;
}

/* "0000:18:00.0": 4 hex, ':', 2 hex, ':', 2 hex, '.', 1 digit. */
static int rn_is_bdf(const char *s) {
  static const char pat[] = "xxxx:xx:xx.x";
  if (strlen(s) != sizeof(pat) - 1) return 0;
  for (size_t i = 0; i < sizeof(pat) - 1; i++) {
    if (pat[i] == 'x' ? !isxdigit((unsigned char)s[i]) : s[i] != pat[i]) return 0;
  }
  return 1;
}

int rn_sysfs_pci_parent(const char *devpath, char *pci_path, size_t len, char *busid,
                        size_t busidlen) {
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s", devpath);
  for (;;) {
    char *slash = strrchr(p, '/');
    if (slash == NULL) return -1;
    if (rn_is_bdf(slash + 1)) {
      if ((size_t)snprintf(pci_path, len, "%s", p) >= len) return -1;
      snprintf(busid, busidlen, "%s", slash + 1);
      for (char *c = busid; *c; c++) *c = (char)tolower((unsigned char)*c);
      return 0;
    }
    if (slash == p) return -1;
    *slash = '\0';
  }
}
