//! The function libraries read through `FUNCTION DUMP` and `FUNCTION
//! LIST`.

use redis_module::Context;

/// `FUNCTION DUMP` on `ctx`; `None` when the reply is not a payload.
pub fn functions_dump(ctx: &Context) -> Option<Vec<u8>> {
    use redis_module::{CallOptionsBuilder, CallReply, CallResult};
    let opts = CallOptionsBuilder::new().errors_as_replies().build();
    let args: [&[u8]; 1] = [b"DUMP"];
    match ctx.call_ext::<_, CallResult>("FUNCTION", &opts, &args[..]) {
        Ok(CallReply::String(s)) => Some(s.as_bytes().to_vec()),
        _ => None,
    }
}

/// Each function library on `ctx` as its name and code (`FUNCTION LIST
/// WITHCODE`), or only the one called `named`; `None` when the reply is
/// not that list.
pub fn function_libraries(ctx: &Context, named: Option<&[u8]>) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut args: Vec<&[u8]> = vec![b"LIST"];
    if let Some(name) = named {
        args.extend([&b"LIBRARYNAME"[..], name]);
    }
    args.push(b"WITHCODE");
    let mut libraries = Vec::new();
    for listed in function_list(ctx, &args)? {
        libraries.push((listed.name, listed.code?));
    }
    // LIBRARYNAME is a pattern matched in any case: the name exactly.
    if let Some(name) = named {
        libraries.retain(|(n, _)| n == name);
    }
    Some(libraries)
}

/// The library on `ctx` that registers function `function` (names of
/// functions match in any case), if any.
pub fn function_owner(ctx: &Context, function: &[u8]) -> Option<Vec<u8>> {
    function_list(ctx, &[b"LIST"])?
        .into_iter()
        .find(|l| l.functions.iter().any(|f| f.eq_ignore_ascii_case(function)))
        .map(|l| l.name)
}

/// One library of a `FUNCTION LIST` reply.
struct ListedLibrary {
    name: Vec<u8>,
    /// With `WITHCODE`.
    code: Option<Vec<u8>>,
    functions: Vec<Vec<u8>>,
}

/// The libraries of a `FUNCTION LIST ...` reply (`args`); `None` when the
/// reply is not that list.
fn function_list(ctx: &Context, args: &[&[u8]]) -> Option<Vec<ListedLibrary>> {
    use redis_module::{CallOptionsBuilder, CallReply, CallResult};
    let opts = CallOptionsBuilder::new().errors_as_replies().build();
    let Ok(CallReply::Array(list)) = ctx.call_ext::<_, CallResult>("FUNCTION", &opts, args) else {
        return None;
    };
    let mut out = Vec::with_capacity(list.len());
    for library in list.iter() {
        let Ok(CallReply::Array(fields)) = library else {
            return None;
        };
        let mut listed = ListedLibrary {
            name: Vec::new(),
            code: None,
            functions: Vec::new(),
        };
        let mut named = false;
        for at in (0..fields.len()).step_by(2) {
            let value = fields.get(at + 1);
            match reply_bytes(fields.get(at)).as_deref() {
                Some(b"library_name") => {
                    listed.name = reply_bytes(value)?;
                    named = true;
                }
                Some(b"library_code") => listed.code = reply_bytes(value),
                Some(b"functions") => listed.functions = function_names(value),
                _ => {}
            }
        }
        named.then_some(())?;
        out.push(listed);
    }
    Some(out)
}

/// The names in a library's `functions` field (an array of flat arrays).
fn function_names(reply: Option<redis_module::CallResult<'_>>) -> Vec<Vec<u8>> {
    use redis_module::CallReply;
    let Some(Ok(CallReply::Array(functions))) = reply else {
        return Vec::new();
    };
    functions
        .iter()
        .filter_map(|f| match f {
            Ok(CallReply::Array(fields)) => (0..fields.len()).step_by(2).find_map(|at| {
                (reply_bytes(fields.get(at)).as_deref() == Some(b"name"))
                    .then(|| reply_bytes(fields.get(at + 1)))
                    .flatten()
            }),
            _ => None,
        })
        .collect()
}

/// The bytes of a string reply.
fn reply_bytes(reply: Option<redis_module::CallResult<'_>>) -> Option<Vec<u8>> {
    match reply {
        Some(Ok(redis_module::CallReply::String(s))) => Some(s.as_bytes().to_vec()),
        _ => None,
    }
}

/// Every library on `ctx` as its name and code: read from `FUNCTION DUMP`
/// (each name from its code's first line), else listed (`FUNCTION LIST
/// WITHCODE`, about twice the cost).
pub fn libraries_held(ctx: &Context) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let from_dump = functions_dump(ctx)
        .as_deref()
        .and_then(crate::redis::libraries::codes)
        .and_then(|codes| {
            codes
                .into_iter()
                .map(|code| Some((crate::redis::libraries::name(&code)?.to_vec(), code)))
                .collect::<Option<Vec<_>>>()
        });
    from_dump.or_else(|| function_libraries(ctx, None))
}

/// How many function libraries `ctx` holds (`FUNCTION STATS`, summed over
/// its engines: no pass over the libraries); `None` when the reply is not
/// read.
pub fn libraries_count(ctx: &Context) -> Option<u64> {
    use redis_module::{CallOptionsBuilder, CallReply, CallResult};
    let opts = CallOptionsBuilder::new().errors_as_replies().build();
    let args: [&[u8]; 1] = [b"STATS"];
    let Ok(CallReply::Array(stats)) = ctx.call_ext::<_, CallResult>("FUNCTION", &opts, &args[..])
    else {
        return None;
    };
    let Some(Ok(CallReply::Array(engines))) =
        stats.get(field_at(stats.len(), |i| reply_bytes(stats.get(i)), b"engines")? + 1)
    else {
        return None;
    };
    let mut count = 0;
    for engine in (1..engines.len()).step_by(2) {
        let Some(Ok(CallReply::Array(fields))) = engines.get(engine) else {
            return None;
        };
        let Some(Ok(CallReply::I64(n))) = fields.get(
            field_at(
                fields.len(),
                |i| reply_bytes(fields.get(i)),
                b"libraries_count",
            )? + 1,
        ) else {
            return None;
        };
        count += u64::try_from(n.to_i64()).ok()?;
    }
    Some(count)
}

/// Where field `name` is in a flat array of names and values (its value
/// follows it): `len` entries, the bytes of entry `i` as `bytes_at(i)`.
fn field_at(len: usize, bytes_at: impl Fn(usize) -> Option<Vec<u8>>, name: &[u8]) -> Option<usize> {
    (0..len)
        .step_by(2)
        .find(|&at| bytes_at(at).as_deref() == Some(name))
}
