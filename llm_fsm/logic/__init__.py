"""JsonLogic, safely: rules read, compiled and checked (``rules``), the operators (``operators``) and JavaScript's
conversions and comparisons they follow (``js_values``). Imports nothing of ours but the errors."""
