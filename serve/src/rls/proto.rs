//! The messages of Envoy's rate limit service, as prost structs: only those `ShouldRateLimit` reads and writes, each
//! field with the number and type Envoy publishes. Written by hand rather than generated, so that building needs no
//! `protoc` and no build script; a field this service does not read (a descriptor's `limit` override, the response's
//! `quota`) is left out, and prost skips it on decoding as protobuf requires.
//!
//! From Envoy's data plane API (Copyright the Envoy Project Authors, Apache License 2.0, the same licence as this
//! workspace): `envoy/service/ratelimit/v3/rls.proto`, `envoy/extensions/common/ratelimit/v3/ratelimit.proto`,
//! `envoy/config/core/v3/base.proto` (`HeaderValue`), and protobuf's well-known `google/protobuf/duration.proto` and
//! `wrappers.proto` (`UInt32Value`).

/// The gRPC path of the one method served: `/{package}.{service}/{method}`.
pub const SHOULD_RATE_LIMIT_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitRequest {
    /// The configuration's namespace (Limitador's namespace); required.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// Each descriptor is limited on; OVER_LIMIT when any is over.
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// How much the request adds to each matched limit; 0 (unset) means 1.
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    /// Its key/value entries, in Envoy's order.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    /// How much this descriptor adds, instead of the request's `hits_addend`.
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<UInt32Value>,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Entry {
    /// The descriptor key (a `request_headers` action's `descriptor_key`, `generic_key`, ...).
    #[prost(string, tag = "1")]
    pub key: String,
    /// Its value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `google.protobuf.UInt32Value`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct UInt32Value {
    /// The value.
    #[prost(uint32, tag = "1")]
    pub value: u32,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse` (without `dynamic_metadata` and `quota`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitResponse {
    /// OVER_LIMIT when any descriptor is over its limit, else OK; UNKNOWN for a request without a domain.
    #[prost(enumeration = "Code", tag = "1")]
    pub overall_code: i32,
    /// One per descriptor of the request, in its order.
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<DescriptorStatus>,
    /// Headers Envoy adds to its response to the client.
    #[prost(message, repeated, tag = "3")]
    pub response_headers_to_add: Vec<HeaderValue>,
    /// Headers Envoy adds to the request it forwards.
    #[prost(message, repeated, tag = "4")]
    pub request_headers_to_add: Vec<HeaderValue>,
    /// The body Envoy answers the client with when not OK.
    #[prost(bytes = "vec", tag = "5")]
    pub raw_body: Vec<u8>,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.Code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Code {
    /// Not known (Envoy lets the request through).
    Unknown = 0,
    /// Under the limit.
    Ok = 1,
    /// Over the limit.
    OverLimit = 2,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus` (without `quota`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DescriptorStatus {
    /// This descriptor's code.
    #[prost(enumeration = "Code", tag = "1")]
    pub code: i32,
    /// The limit that decided, when one did.
    #[prost(message, optional, tag = "2")]
    pub current_limit: Option<RateLimit>,
    /// What is left of it in the current window.
    #[prost(uint32, tag = "3")]
    pub limit_remaining: u32,
    /// How long until the window resets.
    #[prost(message, optional, tag = "4")]
    pub duration_until_reset: Option<Duration>,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimit {
    /// A name of the limit: the deciding policy's id.
    #[prost(string, tag = "3")]
    pub name: String,
    /// The limit per unit of time.
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    /// The window's unit.
    #[prost(enumeration = "Unit", tag = "2")]
    pub unit: i32,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Unit {
    /// Not one of the units below.
    Unknown = 0,
    /// A second.
    Second = 1,
    /// A minute.
    Minute = 2,
    /// An hour.
    Hour = 3,
    /// A day.
    Day = 4,
    /// A calendar month.
    Month = 5,
    /// A calendar year.
    Year = 6,
    /// A week.
    Week = 7,
}

/// `envoy.config.core.v3.HeaderValue` (without `raw_value`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderValue {
    /// The header's name.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Its value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `google.protobuf.Duration`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Duration {
    /// Whole seconds.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// And nanoseconds, 0 to 999,999,999.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}
