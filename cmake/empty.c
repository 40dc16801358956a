/* placeholder translation unit for a layer that has no sources yet */
typedef int egm__empty_layer_t;
