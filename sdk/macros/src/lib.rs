//! `#[filter]` and `#[transaction_checker]`: turn a function or a type into a RockRaft plugin
//! module by generating the ABI's exports (see `rockraft-plugin-sdk`). The exports exist only when
//! building for wasm32, so the same crate unit-tests natively.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{Item, LitBool, LitStr, parse_macro_input};

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Filter,
    Checker,
}

struct Options {
    name: Option<LitStr>,
    bodies: bool,
}

fn options(args: TokenStream, kind: Kind) -> Result<Options, syn::Error> {
    let mut o = Options { name: None, bodies: false };
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            o.name = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("bodies") && kind == Kind::Filter {
            o.bodies = if meta.input.peek(syn::Token![=]) { meta.value()?.parse::<LitBool>()?.value } else { true };
            Ok(())
        } else {
            Err(meta.error(match kind {
                Kind::Filter => "expected `name = \"...\"` or `bodies`",
                Kind::Checker => "expected `name = \"...\"`",
            }))
        }
    });
    syn::parse::Parser::parse(parser, args)?;
    Ok(o)
}

/// Makes a filter plugin. On `fn f(message: &Message, expression: &str) -> bool` (or
/// `Result<bool, E>`), the expression is passed as given on every call; on a type implementing
/// `rockraft_plugin_sdk::Filter`, `open` compiles it once per subscription.
/// Options: `name = "..."` (default: the package name), `bodies` (the plugin reads bodies).
#[proc_macro_attribute]
pub fn filter(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(args, item, Kind::Filter)
}

/// Makes a transaction-checker plugin, from `fn f(message: &Message, config: &str) -> Decision`
/// or a type implementing `rockraft_plugin_sdk::TransactionChecker`.
/// Option: `name = "..."` (default: the package name).
#[proc_macro_attribute]
pub fn transaction_checker(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(args, item, Kind::Checker)
}

fn expand(args: TokenStream, item: TokenStream, kind: Kind) -> TokenStream {
    let o = match options(args, kind) {
        Ok(o) => o,
        Err(e) => return e.to_compile_error().into(),
    };
    let item = parse_macro_input!(item as Item);
    let sdk = quote!(::rockraft_plugin_sdk);
    let (plugin_type, adapter): (Tokens, Tokens) = match &item {
        Item::Fn(f) => {
            let name = &f.sig.ident;
            let adapter = match kind {
                Kind::Filter => quote! {
                    pub struct __RockraftPlugin(::std::string::String);
                    impl #sdk::Filter for __RockraftPlugin {
                        fn open(expression: &str) -> ::core::result::Result<Self, ::std::string::String> {
                            Ok(__RockraftPlugin(expression.to_string()))
                        }
                        fn matches(&self, message: &#sdk::Message<'_>) -> ::core::result::Result<bool, ::std::string::String> {
                            #sdk::IntoMatch::into_match(super::#name(message, &self.0))
                        }
                    }
                },
                Kind::Checker => quote! {
                    pub struct __RockraftPlugin(::std::string::String);
                    impl #sdk::TransactionChecker for __RockraftPlugin {
                        fn open(config: &str) -> ::core::result::Result<Self, ::std::string::String> {
                            Ok(__RockraftPlugin(config.to_string()))
                        }
                        fn check(&self, message: &#sdk::Message<'_>) -> #sdk::Decision {
                            super::#name(message, &self.0)
                        }
                    }
                },
            };
            (quote!(__RockraftPlugin), adapter)
        }
        Item::Struct(s) => {
            let ident = &s.ident;
            (quote!(super::#ident), quote!())
        }
        Item::Enum(e) => {
            let ident = &e.ident;
            (quote!(super::#ident), quote!())
        }
        other => {
            return syn::Error::new_spanned(other, "put this attribute on a function, a struct or an enum")
                .to_compile_error()
                .into();
        }
    };
    let name = o.name.map_or_else(|| quote!(env!("CARGO_PKG_NAME")), |n| quote!(#n));
    let kind_name = match kind {
        Kind::Filter => "filter",
        Kind::Checker => "tx-checker",
    };
    let bodies = if o.bodies { "true" } else { "false" };
    let (open, call, call_export) = match kind {
        Kind::Filter => (quote!(open_filter), quote!(filter), format_ident!("rockraft_filter")),
        Kind::Checker => (quote!(open_checker), quote!(tx_check), format_ident!("rockraft_tx_check")),
    };
    quote! {
        #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
        #item

        #[cfg(target_arch = "wasm32")]
        #[doc(hidden)]
        mod __rockraft_plugin_exports {
            use #sdk::export as rt;
            #adapter
            type Plugin = #plugin_type;

            ::std::thread_local! {
                static HANDLES: rt::Handles<Plugin> = const { rt::Handles::new() };
            }

            static MANIFEST: &str = concat!(
                "{\"abi\":1,\"name\":\"", #name, "\",\"version\":\"", env!("CARGO_PKG_VERSION"),
                "\",\"kinds\":[\"", #kind_name, "\"],\"bodies\":", #bodies, "}"
            );

            /// The ABI major version this module speaks; never called.
            #[unsafe(no_mangle)]
            pub extern "C" fn rockraft_abi_v1() {}

            #[unsafe(no_mangle)]
            pub extern "C" fn rockraft_manifest() -> i64 {
                rt::pack(MANIFEST.as_ptr(), MANIFEST.len())
            }

            #[unsafe(no_mangle)]
            pub extern "C" fn rockraft_alloc(size: i32) -> i32 {
                rt::alloc(size)
            }

            #[unsafe(no_mangle)]
            pub extern "C" fn rockraft_last_error() -> i64 {
                rt::last_error()
            }

            #[unsafe(no_mangle)]
            pub extern "C" fn rockraft_open(kind: i32, ptr: i32, len: i32) -> i32 {
                HANDLES.with(|h| unsafe { rt::#open(h, kind, ptr, len) })
            }

            #[unsafe(no_mangle)]
            pub extern "C" fn rockraft_close(handle: i32) {
                HANDLES.with(|h| rt::close(h, handle))
            }

            #[unsafe(no_mangle)]
            pub extern "C" fn #call_export(handle: i32, ptr: i32, len: i32, count: i32, out: i32) -> i32 {
                HANDLES.with(|h| unsafe { rt::#call(h, handle, ptr, len, count, out) })
            }
        }
    }
    .into()
}
