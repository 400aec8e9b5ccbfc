/* railnet's release version: the one place it is defined.  railnet-topo
 * --version prints it, scripts/deb/build-deb.sh stamps the Debian package
 * with it.  (The wire version, RN_WIRE_VERSION in railnet/transport.h,
 * changes only when two builds can no longer talk to each other.) */
#ifndef RAILNET_VERSION_H
#define RAILNET_VERSION_H

#define RAILNET_VERSION "0.1.0"

#endif
