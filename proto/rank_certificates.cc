#include "proto/rank_certificates.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <charconv>

#include <fmt/format.h>

namespace dslaunch::proto {
namespace {

constexpr long kValiditySeconds = 30L * 24 * 3600;
// Clocks of the hosts may differ a little: certificates are valid from
// slightly before they were made.
constexpr long kClockSkewSeconds = 300;
constexpr std::string_view kUriPrefix = "dslaunch://job/";

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
template <typename T, void (*Free)(T*)>
using Owned = std::unique_ptr<T, Deleter<T, Free>>;
using Key = Owned<EVP_PKEY, EVP_PKEY_free>;
using Certificate = Owned<X509, X509_free>;
using Request = Owned<X509_REQ, X509_REQ_free>;
using Bio = Owned<BIO, BIO_free_all>;
using Names = Owned<GENERAL_NAMES, GENERAL_NAMES_free>;
using Extension = Owned<X509_EXTENSION, X509_EXTENSION_free>;

// What OpenSSL last said went wrong, after `what`.
core::Status openssl_error(const std::string& what) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return core::internal_error(what);
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return core::internal_error(fmt::format("{}: {}", what, text));
}

std::string bio_text(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : std::string();
}

Bio reader_of(std::string_view pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

Key new_key() { return Key(EVP_EC_gen("P-256")); }

bool set_common_name(X509_NAME* name, const std::string& common_name) {
  return X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                    reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                    -1, 0) == 1;
}

// A random positive 127-bit serial number.
bool set_random_serial(X509* certificate) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return false;
  bytes[0] &= 0x7f;
  Owned<BIGNUM, BN_free> number(BN_bin2bn(bytes, sizeof(bytes), nullptr));
  return number && BN_to_ASN1_INTEGER(number.get(), X509_get_serialNumber(certificate)) != nullptr;
}

bool set_validity(X509* certificate) {
  return X509_gmtime_adj(X509_getm_notBefore(certificate), -kClockSkewSeconds) != nullptr &&
         X509_gmtime_adj(X509_getm_notAfter(certificate), kValiditySeconds) != nullptr;
}

// Adds the extension `nid` = `value` (OpenSSL's configuration syntax), with
// `issuer` and `subject` for the key identifiers.
bool add_extension(X509* issuer, X509* subject, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuer, subject, nullptr, nullptr, 0);
  Extension extension(X509V3_EXT_conf_nid(nullptr, &context, nid, value));
  return extension && X509_add_ext(subject, extension.get(), -1) == 1;
}

std::string pem_of(X509* certificate) {
  Bio out(BIO_new(BIO_s_mem()));
  if (!out || PEM_write_bio_X509(out.get(), certificate) != 1) return "";
  return bio_text(out.get());
}

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

// dslaunch://job/<job>/attempt/<a>/rank/<r>
std::optional<RankIdentity> parse_identity_uri(std::string_view uri) {
  if (uri.substr(0, kUriPrefix.size()) != kUriPrefix) return std::nullopt;
  uri.remove_prefix(kUriPrefix.size());
  const size_t attempt_at = uri.rfind("/attempt/");
  const size_t rank_at = uri.rfind("/rank/");
  if (attempt_at == std::string_view::npos || rank_at == std::string_view::npos ||
      rank_at < attempt_at || attempt_at == 0) {
    return std::nullopt;
  }
  const std::optional<int> attempt =
      parse_int(uri.substr(attempt_at + 9, rank_at - attempt_at - 9));
  const std::optional<int> rank = parse_int(uri.substr(rank_at + 6));
  if (!attempt || !rank) return std::nullopt;
  return RankIdentity{std::string(uri.substr(0, attempt_at)), *attempt, *rank};
}

}  // namespace

struct JobCertificateAuthority::Keys {
  Key key;
  Certificate certificate;
};

std::string identity_uri(const RankIdentity& identity) {
  return fmt::format("{}{}/attempt/{}/rank/{}", kUriPrefix, identity.job_id, identity.attempt,
                     identity.rank);
}

std::optional<RankIdentity> identity_in_certificate(std::string_view certificate_pem) {
  Bio in = reader_of(certificate_pem);
  Certificate certificate(PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!certificate) return std::nullopt;
  Names names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(certificate.get(), NID_subject_alt_name, nullptr, nullptr)));
  if (!names) return std::nullopt;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
    const std::string_view text(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                                static_cast<size_t>(ASN1_STRING_length(uri)));
    if (std::optional<RankIdentity> identity = parse_identity_uri(text)) return identity;
  }
  return std::nullopt;
}

core::StatusOr<KeyAndRequest> make_key_and_request(const std::string& common_name) {
  Key key = new_key();
  if (!key) return openssl_error("cannot make a key pair");
  Request request(X509_REQ_new());
  if (!request || X509_REQ_set_version(request.get(), 0) != 1 ||
      !set_common_name(X509_REQ_get_subject_name(request.get()), common_name) ||
      X509_REQ_set_pubkey(request.get(), key.get()) != 1 ||
      X509_REQ_sign(request.get(), key.get(), EVP_sha256()) <= 0) {
    return openssl_error("cannot make a certificate request");
  }
  Bio key_out(BIO_new(BIO_s_mem()));
  Bio request_out(BIO_new(BIO_s_mem()));
  if (!key_out || !request_out ||
      PEM_write_bio_PrivateKey(key_out.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) !=
          1 ||
      PEM_write_bio_X509_REQ(request_out.get(), request.get()) != 1) {
    return openssl_error("cannot write the key and request");
  }
  return KeyAndRequest{bio_text(key_out.get()), bio_text(request_out.get())};
}

core::StatusOr<std::unique_ptr<JobCertificateAuthority>> JobCertificateAuthority::create(
    std::string job_id) {
  auto keys = std::make_unique<Keys>();
  keys->key = new_key();
  keys->certificate.reset(X509_new());
  X509* certificate = keys->certificate.get();
  if (!keys->key || !certificate || X509_set_version(certificate, 2) != 1 ||
      !set_random_serial(certificate) || !set_validity(certificate) ||
      !set_common_name(X509_get_subject_name(certificate),
                       fmt::format("dslaunch job {} CA", job_id).substr(0, 64)) ||
      X509_set_issuer_name(certificate, X509_get_subject_name(certificate)) != 1 ||
      X509_set_pubkey(certificate, keys->key.get()) != 1 ||
      !add_extension(certificate, certificate, NID_basic_constraints,
                     "critical,CA:TRUE,pathlen:0") ||
      !add_extension(certificate, certificate, NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !add_extension(certificate, certificate, NID_subject_key_identifier, "hash") ||
      X509_sign(certificate, keys->key.get(), EVP_sha256()) <= 0) {
    return openssl_error("cannot make the job's certificate authority");
  }
  std::string pem = pem_of(certificate);
  if (pem.empty()) return openssl_error("cannot write the job's CA certificate");
  return std::unique_ptr<JobCertificateAuthority>(
      new JobCertificateAuthority(std::move(job_id), std::move(keys), std::move(pem)));
}

JobCertificateAuthority::JobCertificateAuthority(std::string job_id, std::unique_ptr<Keys> keys,
                                                 std::string pem)
    : job_id_(std::move(job_id)), keys_(std::move(keys)), certificate_pem_(std::move(pem)) {}

JobCertificateAuthority::~JobCertificateAuthority() = default;

core::StatusOr<std::string> JobCertificateAuthority::issue(std::string_view request_pem,
                                                           const RankIdentity& identity) const {
  if (identity.job_id != job_id_) {
    return core::invalid_argument(
        fmt::format("a certificate for job {} asked of job {}'s CA", identity.job_id, job_id_));
  }
  Bio in = reader_of(request_pem);
  Request request(PEM_read_bio_X509_REQ(in.get(), nullptr, nullptr, nullptr));
  EVP_PKEY* public_key = request ? X509_REQ_get0_pubkey(request.get()) : nullptr;
  if (!public_key || X509_REQ_verify(request.get(), public_key) != 1) {
    ERR_clear_error();
    return core::invalid_argument(
        "the certificate request is not a PEM request signed by its own key");
  }
  Certificate certificate(X509_new());
  X509* issued = certificate.get();
  const std::string uri = "URI:" + identity_uri(identity);
  if (!issued || X509_set_version(issued, 2) != 1 || !set_random_serial(issued) ||
      !set_validity(issued) ||
      !set_common_name(X509_get_subject_name(issued),
                       fmt::format("dslaunch rank {}", identity.rank)) ||
      X509_set_issuer_name(issued, X509_get_subject_name(keys_->certificate.get())) != 1 ||
      X509_set_pubkey(issued, public_key) != 1 ||
      !add_extension(keys_->certificate.get(), issued, NID_basic_constraints,
                     "critical,CA:FALSE") ||
      !add_extension(keys_->certificate.get(), issued, NID_key_usage,
                     "critical,digitalSignature") ||
      !add_extension(keys_->certificate.get(), issued, NID_ext_key_usage, "clientAuth") ||
      !add_extension(keys_->certificate.get(), issued, NID_subject_alt_name, uri.c_str()) ||
      !add_extension(keys_->certificate.get(), issued, NID_authority_key_identifier, "keyid") ||
      X509_sign(issued, keys_->key.get(), EVP_sha256()) <= 0) {
    return openssl_error("cannot issue the rank's certificate");
  }
  std::string pem = pem_of(issued);
  if (pem.empty()) return openssl_error("cannot write the rank's certificate");
  return pem;
}

}  // namespace dslaunch::proto
