/* The shared library's only own translation unit: everything it exports comes
 * from the layer archives linked whole; this file keeps the target non-empty. */
#include <egmstore/egmstore.h>

const char *egm__library_version(void);
const char *egm__library_version(void)
{
    return EGMSTORE_VERSION;
}
