/* Placeholder: filled in by the module's owner. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_crecords", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__crecords(void) { return PyModule_Create(&module); }
