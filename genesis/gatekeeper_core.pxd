# Static types for the Cython build of gatekeeper_core.py (scripts/build_native.py); the .py
# stays plain Python. Only what the profile pays for: the two walkers as extension types with
# C-level attributes and methods, and the lookup tables of the hot paths as C globals.

cimport cython

cdef dict _DISPATCH
cdef dict _FIELDS
cdef dict _NODE_NAMES
cdef dict _EXPR_FIELDS
cdef dict _OPERATOR_NAMES
cdef dict _FLOW_HANDLERS
cdef frozenset _SUSPECT_NAMES
cdef frozenset _BUILTINS
# The node classes of genesis.gatekeeper_core's "from ast import (...)" block.
cdef object _AST, _AnnAssign, _Assert, _Assign, _AsyncFor, _AsyncFunctionDef, _AsyncWith, _Attribute, _AugAssign
cdef object _Await, _BinOp, _BitOr, _BoolOp, _Break, _Call, _ClassDef, _Compare, _Constant, _Continue, _Del, _Delete
cdef object _Dict, _DictComp, _ExceptHandler, _Expr, _For, _FunctionDef, _GeneratorExp, _Global, _If, _IfExp
cdef object _Import, _ImportFrom, _Lambda, _List, _ListComp, _Load, _Match, _Module, _Name, _NamedExpr
cdef object _Nonlocal, _Pass, _Raise, _Return, _Set, _SetComp, _Starred, _Store, _Subscript, _Try, _TryStar
cdef object _Tuple, _UAdd, _USub, _UnaryOp, _While, _With, _Yield, _YieldFrom
cdef tuple _COMPREHENSION_TYPES


cdef class _Scanner:
    cdef public list tokens
    cdef public dict findings
    cdef public object trait_node
    cdef public object entity
    cdef public bint in_trait
    cdef public dict module_aliases
    cdef public set imported_names
    cdef public object module_base
    cdef public set module_scope
    cdef public set scope
    cdef public set function_scope
    cdef public object function_node
    cdef public dict function_locals
    cdef public set functions_with_del
    cdef public bint in_function
    cdef public bint async_ok
    cdef public int loop_depth
    cdef public int depth
    cdef public set watched
    cdef public dict class_methods
    cdef public list entity_uses
    cdef public bint needs_escape_analysis
    cdef public list pending_stores
    cdef public set self_stored_attrs
    cdef public object self_name
    cdef public bint method_context

    cpdef found(self, step, node, code, problem, hint=*)
    cpdef visit(self, node)

    @cython.locals(tokens=list, name=str, field_name=str)
    cpdef generic(self, node)

    @cython.locals(tokens=list)
    cpdef field(self, value)

    cpdef bind(self, name, node)
    cpdef _name_checks(self, node, name)
    cpdef _watched_name(self, node, name, parent, field_name)
    cpdef _dunder_string(self, node)

    @cython.locals(tokens=list, attr=str, base=str, name=str)
    cpdef _attribute(self, node)

    # Handlers reached through the dispatch table (their Python-callable form) and directly.
    cpdef _call(self, node)
    cpdef _name(self, node)
    cpdef _constant(self, node)
    cpdef _arg(self, node)
    cpdef _return(self, node)
    cpdef _loop(self, node)
    cpdef _comprehension(self, node)
    cpdef _enter_function(self, node, bint is_async, fields)


cdef class _FlowChecker:
    cdef public set module_names
    cdef public dict function_locals
    cdef public set functions_with_del
    cdef public bint future_annotations
    cdef public set locals
    cdef public tuple enclosing
    cdef public object function_name
    cdef public bint has_del
    cdef public list loops

    cpdef _missing(self, node)

    @cython.locals(field_name=str)
    cpdef _expr(self, node, set state)

    cpdef _bind(self, target, set state)
    cpdef _block(self, list statements, set state)
    cpdef _expr_statement(self, node, set state)
    cpdef _assign(self, node, set state)
    cpdef _aug_assign(self, node, set state)
    cpdef _return(self, node, set state)
    cpdef _if(self, node, set state)
    cpdef _for(self, node, set state)
    cpdef check_function(self, node, tuple enclosing)
    cpdef _nested(self, node)
    cpdef _comprehension(self, node, set state)
