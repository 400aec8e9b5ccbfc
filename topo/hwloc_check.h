/* Private to topo/: checks and normalises a parsed hwloc XML tree so that
 * libhwloc can load it without crashing.  Owner: topo/hwloc_check.c. */
#ifndef RN_TOPO_HWLOC_CHECK_H
#define RN_TOPO_HWLOC_CHECK_H

#include <stddef.h>

#include "xml.h"

/* 0 when root may go to hwloc (after in-place fixes: missing complete_*
 * sets filled in, a 3.0 document rewritten as 2.0); -1 with err naming
 * name, the line and the problem. */
int rn_hwloc_xml_check(struct rn_topo_xml_node *root, const char *name, char *err, size_t errlen);

#endif
